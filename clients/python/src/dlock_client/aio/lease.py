"""A held lease (the asyncio twin of ``dlock_client._sync.lease``): its fence, the ``lost``
event, renewing, checking and giving it back."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psycopg

from .._model import Grant
from .._schedule import Schedule
from .._sql import Statements
from ..errors import ConnectionFailed, DlockError, LeaseLost
from . import watchdog

if TYPE_CHECKING:
    from .shared import Shared

log = logging.getLogger("dlock_client")


class Lease:
    """A held lock: one hold of a lease. While held, a watchdog task renews it every third of
    its ttl; :attr:`lost` (an :class:`asyncio.Event`) is set if it is lost anyway. Used with
    ``async with`` it is released on exit, and the block raises
    :class:`~dlock_client.LeaseLost` if the lease was lost before it ended."""

    def __init__(
        self,
        shared: Shared,
        statements: Statements,
        owner: str,
        key: str,
        grant: Grant,
        ttl: float | None,
        sent: float,
        renew_every: float | None,
        session: psycopg.AsyncConnection[Any] | None,
    ) -> None:
        self._shared = shared
        self._statements = statements
        self._owner = owner
        self._key = key
        self._fence = grant.fence
        self._ttl = ttl
        self._session = session
        #: Set when the lease is lost while it is still wanted; never on release.
        self.lost = asyncio.Event()
        #: Set when the holder lets go: stops the watchdog.
        self.ended_event = asyncio.Event()
        self._released = False
        if ttl is None:
            self._expires_at: datetime | None = None
            self.schedule = Schedule(float("inf"), float("inf"), None, sent)
        else:
            self._expires_at = grant.server_now + timedelta(seconds=ttl)
            self.schedule = Schedule(ttl, sent + grant.server_elapsed + ttl, renew_every, sent)
            watchdog.spawn(self)
        shared.held.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self._key!r} fence={self._fence} held={self.is_held}>"

    @property
    def key(self) -> str:
        """The locked key (for a multi-key lease, its keys joined with ``", "``)."""
        return self._key

    @property
    def fence(self) -> int:
        """The fence token: larger than any earlier grant's of this key."""
        return self._fence

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def session_bound(self) -> bool:
        return self._ttl is None

    @property
    def expires_at(self) -> datetime | None:
        """When the lease ends unless renewed, as last known (server clock)."""
        return self._expires_at

    @property
    def is_held(self) -> bool:
        """Whether the lease is still ours as far as this process knows (no round trip)."""
        return not (self.lost.is_set() or self.ended_event.is_set()) and time.monotonic() < self.schedule.deadline

    def mark_lost(self, reason: str) -> None:
        if not self.ended_event.is_set() and not self.lost.is_set():
            log.warning("dlock: lease lost: key=%s fence=%s: %s", self._key, self._fence, reason)
            self.lost.set()

    async def renew(self) -> datetime | None:
        """Renews the lease now for another ttl: the new expiry (``None`` for a session-bound
        lease, which is only checked); :class:`~dlock_client.LeaseLost` if no longer ours."""
        if self._ttl is None:
            try:
                held = await self.holds()
            except ConnectionFailed:
                # The lease's session is what kept it: with the session gone, so is the lease.
                if self._session is None or not self._session.closed:
                    raise
                held = False
            if not held:
                self.mark_lost("the session-bound lease is gone")
                raise LeaseLost(f"the lease on {self._key!r} is gone")
            return None
        sent = time.monotonic()
        expiry = await self.renew_ttl()
        if expiry is None:
            self.mark_lost("renewal answered that the lease is no longer ours")
            raise LeaseLost(f"the lease on {self._key!r} is no longer ours")
        self.schedule.extended(sent)
        return expiry

    async def renew_ttl(self) -> datetime | None:
        assert self._ttl is not None
        row = await self._shared.connections.one(self._statements.renew, (self._key, self._owner, self._ttl))
        expiry: datetime | None = row[0]
        if expiry is not None:
            self._expires_at = expiry
        return expiry

    async def holds(self) -> bool:
        """Whether the live lease on the key still carries this fence (``dlock_holds``)."""
        params = (self._key, self._fence)
        if self._session is not None:
            row = (await self._shared.connections.run(self._session, self._statements.holds, params))[0]
        else:
            row = await self._shared.connections.one(self._statements.holds, params)
        return bool(row[0])

    async def release(self) -> bool:
        """Gives this hold back now: ``True`` if the lease was still ours."""
        if self._released:
            return False
        self._released = True
        self.ended_event.set()
        self._shared.held.discard(self)
        session, self._session = self._session, None
        try:
            return await self._release_call(session)
        except DlockError:
            if session is not None:
                await session.close()
            raise
        finally:
            if session is not None:
                await self._shared.connections.give_back(session)

    async def _release_call(self, session: psycopg.AsyncConnection[Any] | None) -> bool:
        params = (self._key, self._owner)
        if session is None:
            row = await self._shared.connections.one(self._statements.release, params)
        else:
            row = (await self._shared.connections.run(session, self._statements.release, params))[0]
        return bool(row[0])

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lost_during_work = not self.is_held
        try:
            still_ours = await self.release()
        except DlockError as e:
            log.warning("dlock: release of %s after its block failed: %s", self._key, e)
            still_ours = True
        if exc_type is None and (lost_during_work or not still_ours):
            raise LeaseLost(f"the lease on {self._key!r} was lost before its block ended")


class MultiLease(Lease):
    """Every key of a multi-key lock, held together; renewed and released key by key (see
    ``dlock_client.MultiLease``)."""

    def __init__(self, shared: Shared, statements: Statements, owner: str, keys: list[str],
                 fences: list[int], grant: Grant, ttl: float, sent: float,
                 renew_every: float | None) -> None:
        self._keys = keys
        self._fences = fences
        super().__init__(shared, statements, owner, ", ".join(keys), grant, ttl, sent, renew_every, None)

    @property
    def keys(self) -> list[str]:
        return list(self._keys)

    @property
    def fences(self) -> list[int]:
        return list(self._fences)

    async def renew_ttl(self) -> datetime | None:
        assert self._ttl is not None
        connections = self._shared.connections
        connection = await connections.take()
        try:
            expiries = [
                (await connections.run(connection, self._statements.renew, (key, self._owner, self._ttl)))[0][0]
                for key in self._keys
            ]
        finally:
            await connections.give_back(connection)
        if any(expiry is None for expiry in expiries):
            return None
        self._expires_at = min(expiries)
        return self._expires_at

    async def holds(self) -> bool:
        row = await self._shared.connections.one(self._statements.holds_all, (self._keys, self._fences))
        return bool(row[0])

    async def _release_call(self, session: psycopg.AsyncConnection[Any] | None) -> bool:
        connections = self._shared.connections
        connection = await connections.take()
        try:
            answers = [
                (await connections.run(connection, self._statements.release, (key, self._owner)))[0][0]
                for key in self._keys
            ]
        finally:
            await connections.give_back(connection)
        return all(answers)
