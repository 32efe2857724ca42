"""Elections (the asyncio twin of ``dlock_client._sync.election``): campaigning for the lead,
the leadership that keeps it, who leads now, and observing changes of leader."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

from .. import _args
from .._model import Leader
from .._request import Request
from ..errors import NotAcquired, Unsupported
from .lease import Lease
from .lock import Lock
from .waiting import RECHECK, Watched

if TYPE_CHECKING:
    from .shared import Shared


class Election:
    """An election, by name: ``await client.election("scheduler").campaign("node-a:8080")``.
    Its term is the leader's fence, so terms only grow."""

    def __init__(self, shared: Shared, owner: str, name: str, ttl: float, wait: float | None,
                 lock_delay: float) -> None:
        self._shared = shared
        self._owner = owner
        self.name = name
        self._ttl = ttl
        self._wait = wait
        self._lock_delay = lock_delay

    async def campaign(self, info: str | None = None) -> Leadership:
        """Waits (the election's ``wait``; default without limit) to lead, publishing ``info``.
        The wait holds no pooled connection. :class:`~dlock_client.NotAcquired` if it runs out."""
        request = Request(self.name, self._owner, "leader", self._ttl, info=_args.info(info),
                          lock_delay=self._lock_delay)
        lease = await Lock(self._shared, request, self._wait, True, None).try_acquire()
        if lease is None:
            raise NotAcquired(self.name, waited=self._wait != 0.0)
        return Leadership(lease)

    async def leader(self) -> Leader | None:
        """The current leader, or ``None`` when nobody leads."""
        statements = await self._shared.statements()
        rows = await self._shared.connections.rows(statements.leader, (self.name,))
        if not rows:
            return None
        info, term, since, expires_at = rows[0]
        return Leader(info, int(term), since, expires_at)

    async def observe(self) -> LeaderChanges:
        """The leaders as they change, as an async iterator: first the leader now, then every
        change the server notifies. :class:`~dlock_client.Unsupported` behind a transaction
        pooler: poll :meth:`leader` there."""
        if not self._shared.waits.listens:
            raise Unsupported(
                "observing an election needs the client's listener connection, which a client "
                "behind a transaction pooler has not: poll leader() instead"
            )
        statements = await self._shared.statements()
        watched = await Watched(self._shared.waits, self.name, statements).start()
        return LeaderChanges(self, watched)


class Leadership:
    """The lead of an election, kept by the watchdog until resigned; ``async with`` resigns on
    exit, raising :class:`~dlock_client.LeaseLost` if the lead was lost before the block ended."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    @property
    def election(self) -> str:
        return self._lease.key

    @property
    def term(self) -> int:
        """The term: greater than every earlier leader's."""
        return self._lease.fence

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lead is lost while still wanted: stop acting as leader."""
        return self._lease.lost

    @property
    def is_leading(self) -> bool:
        return self._lease.is_held

    @property
    def expires_at(self) -> datetime | None:
        return self._lease.expires_at

    async def renew(self) -> datetime | None:
        return await self._lease.renew()

    async def holds(self) -> bool:
        return await self._lease.holds()

    async def resign(self) -> bool:
        """Gives up the lead now: ``True`` if it was still ours."""
        return await self._lease.release()

    async def __aenter__(self) -> Leadership:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._lease.__aexit__(exc_type, exc, tb)


class LeaderChanges(AsyncIterator["Leader | None"]):
    """The leaders of an election as they change: ``async for``, or :meth:`get` with a timeout.
    Close it (or use ``async with``) to stop watching."""

    def __init__(self, election: Election, watched: Watched) -> None:
        self._election = election
        self._watched = watched
        self._last: tuple[int | None] | None = None

    async def get(self, timeout: float | None = None) -> Leader | None:
        """The next leader (``None``: nobody leads), waiting up to ``timeout`` seconds for a
        change; :class:`TimeoutError` if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            leader = await self._election.leader()
            term = (leader.term if leader is not None else None,)
            if term != self._last:
                self._last = term
                return leader
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"no change of leader of {self._election.name!r} within {timeout} s")
            pause = RECHECK if deadline is None else min(RECHECK, deadline - now)
            await self._watched.changed(pause)

    async def __anext__(self) -> Leader | None:
        return await self.get()

    def close(self) -> None:
        self._watched.close()

    async def __aenter__(self) -> LeaderChanges:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
