"""The watchdog of a client's TTL leases: renews each at its interval (a third of its ttl by
default) while it is held, and declares it lost when a renewal is refused or its local
deadline passes first -- whether or not a renewal is still on its way (a hung connection must
not delay the news).

One thread per client keeps the schedule; renewals run on a few worker threads, so that a slow
one delays no other lease's, and taking a lease costs a push onto a heap rather than a thread.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from .._schedule import Due, Schedule
from ..errors import DlockError, is_transient

#: Renewals of one client on their way at once, at most.
RENEWAL_THREADS = 4


class Watched(Protocol):
    """What the watchdog needs of a lease."""

    schedule: Schedule
    ended: bool

    def renew_ttl(self) -> object | None:
        """One renewal: the new expiry, or ``None`` if the lease is no longer ours."""

    def mark_lost(self, reason: str) -> None:
        """Tells the lease's holder it is lost."""


class Watchdog:
    """The schedule of every TTL lease of one client."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Watched]] = []
        #: The one valid heap entry of each lease (older ones are skipped when popped).
        self._current: dict[int, int] = {}
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._renewals: ThreadPoolExecutor | None = None
        self._closed = False

    def watch(self, lease: Watched) -> None:
        """Starts watching ``lease`` (with a schedule)."""
        with self._cond:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-watchdog", daemon=True)
                self._thread.start()
            self._push(lease)

    def extended(self, lease: Watched, sent: float) -> None:
        """A renewal by hand, sent at ``sent``, moved the lease's expiry."""
        with self._cond:
            lease.schedule.extended(sent)

    def forget(self, lease: Watched) -> None:
        """Stops watching ``lease`` (released): its heap entries are skipped from now on."""
        with self._cond:
            self._current.pop(id(lease), None)

    def _push(self, lease: Watched) -> None:
        seq = next(self._seq)
        self._current[id(lease)] = seq
        heapq.heappush(self._heap, (lease.schedule.next_wake(), seq, lease))
        if self._heap[0][1] == seq:
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread, renewals = self._thread, self._renewals
        if thread is not None:
            thread.join(timeout=5)
        if renewals is not None:
            renewals.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                    else:
                        wait = None
                    self._cond.wait(wait)
                if self._closed:
                    return
                _, seq, lease = heapq.heappop(self._heap)
                if self._current.get(id(lease)) != seq or lease.ended:
                    continue
                due = lease.schedule.due(time.monotonic())
                if due is Due.LOST:
                    del self._current[id(lease)]
                else:
                    self._push(lease)
                    if due is Due.RENEW:
                        self._renewal_threads().submit(self._renew, lease)
            if due is Due.LOST:
                lease.mark_lost("the ttl ran out before the lease was renewed")

    def _renewal_threads(self) -> ThreadPoolExecutor:
        if self._renewals is None:
            self._renewals = ThreadPoolExecutor(RENEWAL_THREADS, thread_name_prefix="dlock-renew")
        return self._renewals

    def _renew(self, lease: Watched) -> None:
        sent = time.monotonic()
        lost: str | None = None
        try:
            expiry = lease.renew_ttl()
            failure: DlockError | None = None
        except DlockError as e:
            expiry, failure = None, e
        with self._cond:
            now = time.monotonic()
            if self._current.get(id(lease)) is None or lease.ended:
                return
            if failure is None and expiry is not None:
                lease.schedule.renewed(sent, now)
            elif failure is not None and is_transient(failure):
                # The connection may come back before the deadline: retry sooner.
                lease.schedule.retry_soon(now)
            else:
                lost = "renewal answered that the lease is no longer ours" if failure is None else f"renewal failed: {failure}"
                del self._current[id(lease)]
            if lost is None:
                self._push(lease)
        if lost is not None:
            lease.mark_lost(lost)
