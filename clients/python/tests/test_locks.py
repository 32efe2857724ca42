"""Locks of the blocking API against a real server: grants, reentrancy, fences, modes, multi-key
locks, session-bound leases, the ``with`` block, the decorator and the schema lookup."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

import dlock_client
from conftest import eventually


def test_a_lock_excludes_others_until_released_and_fences_grow(client: Any, key: Any) -> None:
    a, b = client(), client()
    first = a.lock(key(), ttl=30).acquire()
    assert first.fence > 0 and first.owner == a.owner and first.expires_at is not None
    assert b.lock(key()).try_acquire() is None
    with pytest.raises(dlock_client.NotAcquired) as e:
        b.lock(key()).acquire()
    assert e.value.waited is False and e.value.sqlstate is None
    assert first.release() is True
    assert first.release() is False, "a second release gives nothing back"
    second = b.lock(key()).acquire()
    assert second.fence > first.fence
    second.release()


def test_the_same_owner_reenters_with_the_same_fence(client: Any, key: Any, admin: Any) -> None:
    a = client()
    one, two = a.lock(key()).acquire(), a.lock(key()).acquire()
    assert one.fence == two.fence
    holds = "SELECT hold_count FROM dlock.dlock_locks WHERE key = %s"
    assert admin.execute(holds, (key(),)).fetchone()[0] == 2
    one.release()
    assert two.holds() is True
    two.release()
    assert admin.execute(holds, (key(),)).fetchone() is None


def test_a_with_block_releases_and_raises_lease_lost_when_lost_during_it(client: Any, key: Any) -> None:
    a, admin_client = client(), client()
    with a.lock(key("ok"), ttl=10) as lease:
        assert lease.is_held
    assert not lease.is_held and a.lock(key("ok")).try_acquire() is not None
    with pytest.raises(dlock_client.LeaseLost):
        with a.lock(key("lost"), ttl=1.5) as lease:
            assert admin_client.force_release(key("lost")) is True
            assert lease.lost.wait(5), "the watchdog's next renewal finds the lease gone"
    with pytest.raises(ZeroDivisionError), a.lock(key("error")):
        1 / 0
    assert a.lock(key("error")).try_acquire() is not None, "released although the block raised"


def test_the_decorator_formats_the_key_and_gives_the_lease(client: Any, key: Any) -> None:
    a, b = client(), client()
    seen: list[int] = []

    @a.locked(key("report:{0}"), ttl=10)
    def report(day: str) -> str:
        lease = dlock_client.current_lease()
        assert lease is not None and lease.key == key(f"report:{day}")
        seen.append(lease.fence)
        return day.upper()

    assert report("mon") == "MON" and len(seen) == 1
    assert dlock_client.current_lease() is None
    blocker = b.lock(key("report:tue")).acquire()
    with pytest.raises(dlock_client.NotAcquired):
        report("tue")
    blocker.release()
    assert report("tue") == "TUE"


def test_readers_share_a_key_and_a_writer_waits_for_them(client: Any, key: Any) -> None:
    r1, r2, w = client(), client(), client()
    s1 = r1.lock(key()).shared().acquire()
    s2 = r2.lock(key()).shared().acquire()
    assert s1.fence != s2.fence
    assert w.lock(key()).try_acquire() is None
    with pytest.raises(dlock_client.ModeConflict) as e:
        r1.lock(key()).acquire()
    assert e.value.sqlstate == "0A000"
    s1.release()
    s2.release()
    assert w.lock(key()).acquire().fence > s2.fence


def test_a_semaphore_counts_owners_and_refuses_another_size(client: Any, key: Any) -> None:
    a = client()
    workers = [a.with_owner(f"worker-{i}-{uuid.uuid4().hex}") for i in range(3)]
    permits = [w.semaphore(key(), 2).acquire() for w in workers[:2]]
    assert workers[2].semaphore(key(), 2).try_acquire() is None
    with pytest.raises(dlock_client.InvalidArgument) as e:
        workers[2].semaphore(key(), 3).acquire()
    assert e.value.sqlstate == "22023" and "max_holders" in str(e.value)
    permits[0].release()
    assert workers[2].semaphore(key(), 2, wait=5).acquire().fence > permits[1].fence


def test_a_multi_key_lock_is_all_or_nothing(client: Any, key: Any, admin: Any) -> None:
    x, y = client(), client()
    both = x.lock_all([key("a"), key("b")], ttl=10).acquire()
    assert len(both.fences) == 2 and both.keys == [key("a"), key("b")]
    assert y.lock_all([key("b"), key("c")]).try_acquire() is None
    assert y.lock(key("c")).acquire().release() is True, "nothing of the refused request was held"
    assert both.holds() is True
    assert both.renew() is not None
    assert both.release() is True
    count = "SELECT count(*) FROM dlock.dlock_locks WHERE key = ANY(%s)"
    assert admin.execute(count, ([key("a"), key("b")],)).fetchone()[0] == 0


def test_a_session_bound_lease_keeps_its_connection_and_ends_with_it(client: Any, key: Any, admin: Any) -> None:
    a = client(pool_size=2)
    bound = a.lock(key(), ttl=None).acquire()
    assert bound.session_bound and bound.expires_at is None
    assert bound.renew() is None and bound.holds() is True
    pid = admin.execute("SELECT holder_pid FROM dlock.dlock_locks WHERE key = %s", (key(),)).fetchone()[0]
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    eventually(lambda: admin.execute("SELECT count(*) FROM dlock.dlock_locks WHERE key = %s", (key(),)).fetchone()[0] == 0,
               what="the lease ended with its session")
    with pytest.raises(dlock_client.DlockError):
        bound.renew()
    assert bound.lost.is_set()
    with pytest.raises(dlock_client.ConnectionFailed):
        bound.release()
    assert a.lock(key("after")).acquire().release(), "the pool replaced the broken connection"


def test_server_errors_keep_their_sqlstate(client: Any, key: Any) -> None:
    plain = client()
    with pytest.raises(dlock_client.InvalidArgument) as e:
        plain.lock(key(), ttl=90_000).acquire()  # 25 hours: above dlock.max_ttl
    assert e.value.sqlstate == "22023" and "max_ttl" in str(e.value)
    assert isinstance(e.value.__cause__, psycopg.Error)


def test_the_extension_is_found_in_whatever_schema_it_lives(dsn: str, admin: Any) -> None:
    database = f"dlock_schema_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{database}"')
    try:
        other = psycopg.conninfo.make_conninfo(dsn, dbname=database)
        with dlock_client.Client(other) as c:
            with pytest.raises(dlock_client.NotInstalled, match=database):
                c.lock("k").acquire()
        with psycopg.connect(other, autocommit=True) as setup:
            setup.execute('CREATE SCHEMA "Odd ""Locks"""')
            setup.execute('CREATE EXTENSION dlock SCHEMA "Odd ""Locks"""')
        with dlock_client.Client(other) as c:
            assert c.extension_schema() == 'Odd "Locks"'
            with c.lock("k") as lease:
                assert lease.holds()
    finally:
        admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


def test_close_releases_what_the_client_still_holds(client: Any, key: Any) -> None:
    a, b = client(), client()
    a.lock(key("one")).acquire()
    a.lock_all([key("two"), key("three")]).acquire()
    a.close()
    for name in ("one", "two", "three"):
        assert b.lock(key(name)).try_acquire() is not None


def test_leases_of_many_threads_of_one_client(client: Any, key: Any) -> None:
    a = client(pool_size=3)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(5):
                with a.lock(key(f"t{i}")) as lease:
                    assert lease.holds()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
