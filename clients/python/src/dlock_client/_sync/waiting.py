"""Waiting for a key without holding a pooled connection for the length of the wait, as the
Rust client's ``waiting/``.

The client keeps a local FIFO line per key; only its head talks to the server, and only in
short calls: it tries the key once (a try never queues on the server), and if the key is busy
sleeps until something says it may be free, then tries again. What wakes it:

- **the listener** (the default): one connection shared by every wait of the client, on which
  the server NOTIFYs when a watched key is freed; and the blocking lease's expiry, which the
  server tells in its answer (so client clocks do not matter). The head watches the key
  *before* it tries, so a release is either seen by the try or notified after it;
- **nothing but time** (behind a transaction pooler, where notifications cannot pass): growing,
  jittered pauses between tries, never past the blocking lease's expiry.

The price: a waiter here is not in the server's queue, so waits by other clients on the server
go first, and between clients the first to try after a release wins; within one client,
waiters of a key are granted in arrival order.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, TypeVar

from .._backoff import Backoff
from .._model import Busy
from .._sql import Statements
from .listener import Listener

T = TypeVar("T")

#: How long a head sleeps at most when only a notification can free the key (a session-bound
#: holder, or others queueing on the server): a safety net in case one never comes.
RECHECK = 2.0


class FifoTurn:
    """A lock that is granted in arrival order (``threading.Lock`` promises no order)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._line: deque[object] = deque()
        self._held = False

    def acquire(self, deadline: float | None) -> bool:
        """Waits for the turn until ``deadline`` (``time.monotonic()``; ``None``: no limit)."""
        me = object()
        with self._cond:
            self._line.append(me)
            try:
                while self._held or self._line[0] is not me:
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        return False
                    self._cond.wait(timeout)
                self._held = True
                return True
            finally:
                self._line.remove(me)
                self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()


class KeyLine:
    """The local line of waiters for one key."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.turn = FifoTurn()
        #: Set (and replaced) on every notification for the key, and when the listener is lost.
        self.changed = threading.Event()
        #: Listener generation in which the key was watched (0: not yet).
        self.watched_in = 0
        self.users = 0

    def bump(self) -> None:
        """Wakes whoever sleeps on the line (called with the waits' lock held)."""
        changed, self.changed = self.changed, threading.Event()
        changed.set()


class Waits:
    """The waiting state one client (and its ``with_owner`` copies) share."""

    def __init__(self, listener_factory: Callable[[Waits], Listener] | None, max_poll_interval: float) -> None:
        self._lock = threading.Lock()
        self._lines: dict[str, KeyLine] = {}
        self._by_channel: dict[str, set[str]] = {}
        self.listener = listener_factory(self) if listener_factory is not None else None
        self.max_poll_interval = max_poll_interval

    @property
    def listens(self) -> bool:
        """Whether waits hear of freed keys from the listener (not behind a transaction pooler)."""
        return self.listener is not None

    def has_line(self, key: str) -> bool:
        """Whether waiters of this client are lined up for ``key`` (a newcomer then queues
        behind them instead of trying first)."""
        with self._lock:
            return key in self._lines

    def settle(self, deadline: float | None) -> float | None:
        """How long a try may wait on the server for a transaction changing the key: up to the
        deadline, except behind a transaction pooler, where no call may hold a server
        connection longer than one short statement."""
        if self.listener is None:
            return 0.0
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    def enter(self, key: str) -> KeyLine:
        """Joins the local line of ``key``; :meth:`leave` when done."""
        with self._lock:
            line = self._lines.get(key)
            if line is None:
                line = self._lines[key] = KeyLine(key)
            line.users += 1
            return line

    def leave(self, line: KeyLine, statements: Statements | None) -> None:
        """Leaves the line; the last to leave stops watching the key (unless a colliding key
        still needs its channel)."""
        with self._lock:
            line.users -= 1
            if line.users:
                return
            self._lines.pop(line.key, None)
            shared = False
            for channel, keys in list(self._by_channel.items()):
                if line.key in keys:
                    keys.discard(line.key)
                    shared = shared or bool(keys)
                    if not keys:
                        del self._by_channel[channel]
            if shared or not line.watched_in or self.listener is None or statements is None:
                return
        self.listener.unwatch(line.key, statements.unwatch)

    def watch(self, line: KeyLine, statements: Statements) -> None:
        """Makes sure the listener (connected first if need be) watches the line's key."""
        assert self.listener is not None
        if line.watched_in and line.watched_in == self.listener.generation:
            return
        generation, channel = self.listener.watch(line.key, statements.watch)
        with self._lock:
            self._by_channel.setdefault(channel, set()).add(line.key)
            line.watched_in = generation

    def notified(self, channel: str) -> None:
        """A notification: every line of a key on this channel retries."""
        with self._lock:
            for key in self._by_channel.get(channel, ()):
                line = self._lines.get(key)
                if line is not None:
                    line.bump()

    def lost(self) -> None:
        """The listener is gone: notifications may have been missed, so every head retries
        (and re-watches on a new listener)."""
        with self._lock:
            self._by_channel.clear()
            for line in self._lines.values():
                line.watched_in = 0  # to be watched again, on a new listener
                line.bump()

    def wait(
        self,
        line: KeyLine,
        deadline: float | None,
        statements: Statements,
        attempt: Callable[[float | None], T | Busy],
    ) -> T | None:
        """Waits to be the head of ``line``, then tries with ``attempt(settle)`` until it grants
        or ``deadline`` passes (``None`` then)."""
        if not line.turn.acquire(deadline):
            return None
        try:
            if self.listener is None:
                return self._retry(deadline, attempt)
            return self._wait_notified(line, deadline, statements, attempt)
        finally:
            line.turn.release()

    def _wait_notified(
        self,
        line: KeyLine,
        deadline: float | None,
        statements: Statements,
        attempt: Callable[[float | None], T | Busy],
    ) -> T | None:
        while True:
            # Taken before watching and trying: a notification from here on is not missed.
            changed = line.changed
            self.watch(line, statements)
            tried = attempt(self.settle(deadline))
            if not isinstance(tried, Busy):
                return tried
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            pause = RECHECK if tried.retry_after is None else tried.retry_after
            wake = now + pause if deadline is None else min(deadline, now + pause)
            changed.wait(max(wake - now, 0.0))

    def _retry(self, deadline: float | None, attempt: Callable[[float | None], T | Busy]) -> T | None:
        return retry(deadline, self.max_poll_interval, attempt)


def retry(
    deadline: float | None, max_interval: float, attempt: Callable[[float | None], T | Busy]
) -> T | None:
    """Tries with ``attempt(0)`` (no waiting on the server), pauses, again, until granted or
    ``deadline`` (``None`` then; the last try is at the deadline)."""
    backoff = Backoff(max_interval)
    while True:
        tried = attempt(0.0)
        if not isinstance(tried, Busy):
            return tried
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        pause = backoff.pause(tried.retry_after)
        time.sleep(max((pause if deadline is None else min(pause, deadline - now)), 0.0))


class Watched:
    """A key watched for its own sake rather than by a wait for a lease: an observer of an
    election, a wait for a key to be free. It joins the key's line without taking a turn, so
    that the line's notifications reach it; :meth:`close` leaves."""

    def __init__(self, waits: Waits, key: str, statements: Statements) -> None:
        self._waits = waits
        self._statements = statements
        self._line = waits.enter(key)
        self._changed = self._line.changed
        try:
            waits.watch(self._line, statements)
        except BaseException:
            self.close()
            raise

    def changed(self, timeout: float | None) -> None:
        """Sleeps until a notification for the key (or the loss of the listener) or ``timeout``,
        then makes sure the key is watched again. Look at the key again once it returns."""
        self._changed.wait(timeout)
        self._changed = self._line.changed
        self._waits.watch(self._line, self._statements)

    def close(self) -> None:
        self._waits.leave(self._line, self._statements)
