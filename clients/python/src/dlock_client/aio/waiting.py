"""Waiting for a key without holding a pooled connection for the length of the wait (the
asyncio twin of ``dlock_client._sync.waiting``, whose docs say how): a local FIFO line per key
whose head watches the key on the listener, tries, and sleeps until notified or until the
blocking lease's expiry; behind a transaction pooler, growing jittered pauses instead."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Awaitable, Callable, TypeVar

from .._backoff import Backoff
from .._model import Busy
from .._sql import Statements
from .listener import Listener

T = TypeVar("T")

#: How long a head sleeps at most when only a notification can free the key: a safety net.
RECHECK = 2.0


async def _sleep_on(event: asyncio.Event, timeout: float | None) -> None:
    """Until ``event`` is set or ``timeout`` seconds (``None``: no limit) have passed."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass


class FifoTurn:
    """A lock granted in arrival order, that gives up at a deadline without ever losing a turn
    handed to it meanwhile (``asyncio.wait_for`` around ``Lock.acquire`` can)."""

    def __init__(self) -> None:
        self._held = False
        self._line: deque[asyncio.Future[None]] = deque()

    async def acquire(self, deadline: float | None) -> bool:
        if not self._held and not self._line:
            self._held = True
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        try:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            await asyncio.wait({turn}, timeout=timeout)
        except BaseException:
            self._give_up(turn)
            raise
        if turn.done():
            return True
        self._give_up(turn)
        return False

    def _give_up(self, turn: asyncio.Future[None]) -> None:
        if turn.done() and not turn.cancelled():
            self.release()  # handed the turn as we gave up: pass it on
        else:
            turn.cancel()
            self._line.remove(turn)

    def release(self) -> None:
        """Hands the turn to the next in line, if any."""
        while self._line:
            turn = self._line.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._held = False


class KeyLine:
    """The local line of waiters for one key."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.turn = FifoTurn()
        #: Set (and replaced) on every notification for the key, and when the listener is lost.
        self.changed = asyncio.Event()
        #: Listener generation in which the key was watched (0: not yet).
        self.watched_in = 0
        self.users = 0

    def bump(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class Waits:
    """The waiting state one client (and its ``with_owner`` copies) share."""

    def __init__(self, listener_factory: Callable[[Waits], Listener] | None, max_poll_interval: float) -> None:
        self._lines: dict[str, KeyLine] = {}
        self._by_channel: dict[str, set[str]] = {}
        self.listener = listener_factory(self) if listener_factory is not None else None
        self.max_poll_interval = max_poll_interval

    @property
    def listens(self) -> bool:
        return self.listener is not None

    def has_line(self, key: str) -> bool:
        return key in self._lines

    def settle(self, deadline: float | None) -> float | None:
        """How long a try may wait on the server for a transaction changing the key."""
        if self.listener is None:
            return 0.0
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    def enter(self, key: str) -> KeyLine:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = KeyLine(key)
        line.users += 1
        return line

    def leave(self, line: KeyLine, statements: Statements | None) -> None:
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
        if not shared and line.watched_in and self.listener is not None and statements is not None:
            self.listener.unwatch(line.key, statements.unwatch)

    async def watch(self, line: KeyLine, statements: Statements) -> None:
        """Makes sure the listener (connected first if need be) watches the line's key."""
        assert self.listener is not None
        if line.watched_in and line.watched_in == self.listener.generation:
            return
        generation, channel = await self.listener.watch(line.key, statements.watch)
        self._by_channel.setdefault(channel, set()).add(line.key)
        line.watched_in = generation

    def notified(self, channel: str) -> None:
        for key in self._by_channel.get(channel, ()):
            line = self._lines.get(key)
            if line is not None:
                line.bump()

    def lost(self) -> None:
        self._by_channel.clear()
        for line in self._lines.values():
            line.watched_in = 0  # to be watched again, on a new listener
            line.bump()

    async def wait(
        self,
        line: KeyLine,
        deadline: float | None,
        statements: Statements,
        attempt: Callable[[float | None], Awaitable[T | Busy]],
    ) -> T | None:
        """Waits to be the head of ``line``, then tries until granted or ``deadline``."""
        if not await line.turn.acquire(deadline):
            return None
        try:
            if self.listener is None:
                return await retry(deadline, self.max_poll_interval, attempt)
            while True:
                # Taken before watching and trying: a notification from here on is not missed.
                changed = line.changed
                await self.watch(line, statements)
                tried = await attempt(self.settle(deadline))
                if not isinstance(tried, Busy):
                    return tried
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None
                pause = RECHECK if tried.retry_after is None else tried.retry_after
                wake = now + pause if deadline is None else min(deadline, now + pause)
                await _sleep_on(changed, max(wake - now, 0.0))
        finally:
            line.turn.release()


async def retry(
    deadline: float | None, max_interval: float, attempt: Callable[[float | None], Awaitable[T | Busy]]
) -> T | None:
    """Tries with ``attempt(0)``, pauses, again, until granted or ``deadline``."""
    backoff = Backoff(max_interval)
    while True:
        tried = await attempt(0.0)
        if not isinstance(tried, Busy):
            return tried
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        pause = backoff.pause(tried.retry_after)
        await asyncio.sleep(max((pause if deadline is None else min(pause, deadline - now)), 0.0))


class Watched:
    """A key watched for its own sake (an election's observer, a wait for a free key): it joins
    the key's line without taking a turn; :meth:`close` leaves."""

    def __init__(self, waits: Waits, key: str, statements: Statements) -> None:
        self._waits = waits
        self._statements = statements
        self._line = waits.enter(key)
        self._changed = self._line.changed

    async def start(self) -> Watched:
        try:
            await self._waits.watch(self._line, self._statements)
        except BaseException:
            self.close()
            raise
        return self

    async def changed(self, timeout: float | None) -> None:
        """Sleeps until a notification for the key (or the loss of the listener) or ``timeout``,
        then makes sure the key is watched again."""
        await _sleep_on(self._changed, timeout)
        self._changed = self._line.changed
        await self._waits.watch(self._line, self._statements)

    def close(self) -> None:
        self._waits.leave(self._line, self._statements)
