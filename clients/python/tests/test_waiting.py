"""Waits of the blocking API: no pooled connection held, arrival order within a client, wake-up
by notification and by expiry, the listener's loss, timeouts, and waiting for a free key."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import dlock_client
from conftest import eventually


def waiting(client: dlock_client.Client, key: str) -> bool:
    """Whether a waiter of ``client`` is lined up for ``key`` (white box: its local line)."""
    return client._shared.waits.has_line(key)


def test_a_wait_ends_not_acquired_when_its_time_runs_out(client: Any, key: Any) -> None:
    a, b = client(), client()
    held = a.lock(key()).acquire()
    started = time.monotonic()
    with pytest.raises(dlock_client.NotAcquired) as e:
        b.lock(key(), wait=0.4).acquire()
    assert 0.35 < time.monotonic() - started < 5 and e.value.waited
    assert not waiting(b, key()), "the waiter left its line"
    held.release()


def test_a_release_wakes_a_waiter_at_once(client: Any, key: Any) -> None:
    a, b = client(), client()
    held = a.lock(key(), ttl=60).acquire()
    got: list[dlock_client.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(b.lock(key(), wait=30).acquire()))
    waiter.start()
    eventually(lambda: waiting(b, key()), what="the waiter is lined up")
    time.sleep(0.2)  # past its first try: asleep on the listener
    released = time.monotonic()
    held.release()
    waiter.join(10)
    assert got and got[0].fence > held.fence
    assert time.monotonic() - released < 1.5, "woken by the notification, not by a 2 s recheck"


def test_the_blocking_leases_expiry_wakes_a_waiter(client: Any, key: Any) -> None:
    a, b = client(), client()
    held = a.lock(key(), ttl=1.0, watchdog=False).acquire()
    started = time.monotonic()
    lease = b.lock(key(), wait=20).acquire()
    assert lease.fence > held.fence and time.monotonic() - started < 5


def test_waiters_hold_no_pooled_connection(client: Any, key: Any, admin: Any) -> None:
    holder, a = client(), client(pool_size=2)
    blocker = holder.lock(key()).acquire()
    workers = [a.with_owner(f"w{i}-{uuid.uuid4().hex}") for i in range(12)]
    fences: list[int] = []

    def work(worker: dlock_client.Client) -> None:
        with worker.lock(key(), wait=30) as lease:
            fences.append(lease.fence)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    eventually(lambda: waiting(a, key()))
    # The pool of 2 is free for other calls while 12 wait.
    started = time.monotonic()
    with a.lock(key("other")):
        pass
    assert time.monotonic() - started < 5
    assert admin.execute("SELECT count(*) FROM dlock.dlock_locks WHERE key = %s AND waiters > 0", (key(),)).fetchone()[0] == 0
    blocker.release()
    for t in threads:
        t.join(30)
    assert len(fences) == 12 and fences == sorted(fences) and len(set(fences)) == 12


def test_waiters_of_one_client_are_granted_in_arrival_order(client: Any, key: Any) -> None:
    holder, a = client(), client()
    blocker = holder.lock(key()).acquire()
    order: list[int] = []
    line = a._shared.waits

    def work(i: int) -> None:
        with a.with_owner(f"w{i}-{uuid.uuid4().hex}").lock(key(), wait=30):
            order.append(i)

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=work, args=(i,)))
        threads[-1].start()
        # The next arrives only once this one is in line.
        eventually(lambda: line._lines.get(key()) is not None and line._lines[key()].users == i + 1)
    blocker.release()
    for t in threads:
        t.join(30)
    assert order == [0, 1, 2, 3, 4]


def test_a_lost_listener_is_replaced_and_its_waiters_still_woken(client: Any, key: Any, admin: Any) -> None:
    app = f"listener-{uuid.uuid4().hex[:8]}"
    a, b = client(), client(dsn=f"{admin.info.dsn} application_name={app}")
    held = a.lock(key(), ttl=60).acquire()
    got: list[dlock_client.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(b.lock(key(), wait=30).acquire()))
    waiter.start()
    listener = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE '%%dlock_watch%%'"
    eventually(lambda: admin.execute(listener, (app,)).fetchone() is not None, what="the listener watches")
    old = admin.execute(listener, (app,)).fetchone()[0]
    admin.execute("SELECT pg_terminate_backend(%s)", (old,))
    eventually(lambda: (row := admin.execute(listener, (app,)).fetchone()) is not None and row[0] != old,
               what="a new listener watches the key again")
    held.release()
    waiter.join(10)
    assert got and got[0].fence > held.fence


def test_wait_free_waits_without_taking_the_key(client: Any, key: Any, admin: Any) -> None:
    a, b = client(), client()
    assert b.wait_free(key(), 0) is True
    held = a.lock(key()).acquire()
    assert b.wait_free(key(), 0.2) is False
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(b.wait_free(key(), 20)))
    waiter.start()
    eventually(lambda: waiting(b, key()))
    held.release()
    waiter.join(10)
    assert result == [True]
    assert admin.execute("SELECT count(*) FROM dlock.dlock_locks WHERE key = %s", (key(),)).fetchone()[0] == 0
