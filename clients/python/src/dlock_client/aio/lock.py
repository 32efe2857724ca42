"""Describing a lock and taking it (the asyncio twin of ``dlock_client._sync.lock``): one
acquire statement, or a wait made of tries (see ``waiting``)."""

from __future__ import annotations

import dataclasses
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable

from .. import _model
from .._model import Busy, Grant
from .._request import Request
from .._schedule import renewal_interval
from .._sql import Statements
from ..errors import NotAcquired, Unsupported
from .lease import Lease, MultiLease
from .waiting import retry

if TYPE_CHECKING:
    from .shared import Shared

SESSION_BOUND_BEHIND_POOLER = (
    "a session-bound lease through a transaction pooler: its session would be whichever server "
    "connection the pooler lent for the call, which neither ends with this client nor carries "
    "its later calls; give the lease a ttl"
)


class _Acquirable:
    """What locks and multi-key locks share: acquire, try_acquire, and ``with``."""

    _held: list[Lease]

    async def try_acquire(self) -> Lease | None:
        raise NotImplementedError

    @property
    def _what(self) -> str:
        raise NotImplementedError

    @property
    def _waits(self) -> bool:
        raise NotImplementedError

    async def acquire(self) -> Lease:
        """Takes the lock: a lease, or :class:`~dlock_client.NotAcquired` when another owner
        keeps the key (at once without a wait, or when the wait ran out)."""
        lease = await self.try_acquire()
        if lease is None:
            raise NotAcquired(self._what, waited=self._waits)
        return lease

    async def __aenter__(self) -> Lease:
        lease = await self.acquire()
        self._held.append(lease)
        return lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._held.pop().__aexit__(exc_type, exc, tb)


class Lock(_Acquirable):
    """A lock being described: ``client.lock(key, ttl=30, wait=10)``. Nothing happens until
    :meth:`acquire`, :meth:`try_acquire` or ``async with``.

    A wait holds no pooled connection: the client's waiters of a key line up locally, in
    arrival order, and only the head talks to the server, in short tries -- again when the
    server notifies that the key was freed or the blocking lease runs out (behind a
    transaction pooler, after growing pauses).
    """

    def __init__(
        self,
        shared: Shared,
        request: Request,
        wait: float | None,
        watchdog: bool,
        renew_every: float | None,
    ) -> None:
        self._shared = shared
        self._request = request
        self._wait = wait
        self._watchdog = watchdog
        self._renew_every = renew_every
        self._held = []

    @property
    def key(self) -> str:
        """The key this lock takes."""
        return self._request.key

    @property
    def _what(self) -> str:
        return self._request.key

    @property
    def _waits(self) -> bool:
        return self._wait != 0.0

    def shared(self) -> Lock:
        """The same lock as a shared lease (a read lock, ``dlock_acquire_shared``): any number
        of owners hold the key shared at once, and none while an exclusive lease holds it.
        Asking for a key in the other mode than this owner holds it in is
        :class:`~dlock_client.ModeConflict`."""
        if self._request.kind == "shared":
            return self
        request = dataclasses.replace(self._request, kind="shared", permits=None)
        return Lock(self._shared, request, self._wait, self._watchdog, self._renew_every)

    async def try_acquire(self) -> Lease | None:
        """Takes the lock if it can (within the wait, if one was set): ``None`` when another
        owner keeps the key."""
        if self._request.ttl is None and self._shared.connections.transaction_pooler:
            raise Unsupported(SESSION_BOUND_BEHIND_POOLER)
        statements = await self._shared.statements()
        if self._wait == 0.0:
            sql, params = self._request.waiting(statements, 0.0)
            answer = await self._send(statements, sql, params, _model.acquired)
            return answer if isinstance(answer, Lease) else None
        deadline = None if self._wait is None else time.monotonic() + self._wait
        waits = self._shared.waits
        key = self._request.key

        async def attempt(settle: float | None) -> Lease | Busy:
            sql, params = self._request.trying(statements, settle)
            return await self._send(statements, sql, params, _model.tried)

        # Nobody of ours in line for the key: one try is all it takes when it is free.
        if not waits.has_line(key):
            answer = await attempt(waits.settle(deadline))
            if isinstance(answer, Lease):
                return answer
        line = waits.enter(key)
        try:
            return await waits.wait(line, deadline, statements, attempt)
        finally:
            waits.leave(line, statements)

    async def _send(
        self,
        statements: Statements,
        sql: str,
        params: tuple[Any, ...],
        parse: Callable[[tuple[Any, ...]], Grant | Busy],
    ) -> Lease | Busy:
        """One acquire statement on a pooled connection; a session-bound grant keeps it."""
        connections = self._shared.connections
        connection = await connections.take()
        kept = False
        try:
            sent = time.monotonic()
            answer = parse((await connections.run(connection, sql, params))[0])
            if isinstance(answer, Busy):
                return answer
            request = self._request
            session_bound = request.ttl is None
            renew_every = None
            if request.ttl is not None and self._watchdog:
                renew_every = renewal_interval(request.ttl, self._renew_every)
            lease = Lease(
                self._shared,
                statements,
                request.owner,
                request.key,
                answer,
                request.ttl,
                sent,
                renew_every,
                connection if session_bound else None,
            )
            kept = session_bound
            return lease
        finally:
            if not kept:
                await connections.give_back(connection)


class MultiLock(_Acquirable):
    """A lock on several keys at once, all or none: ``client.lock_all(keys, ttl=30)``.

    The server never holds a subset and takes the keys in one global order, so callers that
    list the same keys in different orders never deadlock. A wait waits in the server's queue
    (holding one pooled connection for its length); behind a transaction pooler it retries,
    holding no server connection between tries.
    """

    def __init__(
        self,
        shared: Shared,
        owner: str,
        keys: list[str],
        ttl: float,
        wait: float | None,
        watchdog: bool,
        renew_every: float | None,
        lock_delay: float,
    ) -> None:
        self._shared = shared
        self._owner = owner
        self.keys = keys
        self._ttl = ttl
        self._wait = wait
        self._watchdog = watchdog
        self._renew_every = renew_every
        self._lock_delay = lock_delay
        self._held = []

    @property
    def _what(self) -> str:
        return ", ".join(self.keys)

    @property
    def _waits(self) -> bool:
        return self._wait != 0.0

    async def acquire(self) -> MultiLease:
        lease = await super().acquire()
        assert isinstance(lease, MultiLease)
        return lease

    async def __aenter__(self) -> MultiLease:
        lease = await super().__aenter__()
        assert isinstance(lease, MultiLease)
        return lease

    async def try_acquire(self) -> MultiLease | None:
        """Takes every key if it can (within the wait): ``None`` when some key stays held."""
        statements = await self._shared.statements()
        if self._wait != 0.0 and self._shared.connections.transaction_pooler:
            deadline = None if self._wait is None else time.monotonic() + self._wait
            return await retry(deadline, self._shared.max_poll_interval, lambda _: self._send(statements, 0.0))
        answer = await self._send(statements, self._wait)
        return answer if isinstance(answer, MultiLease) else None

    async def _send(self, statements: Statements, wait: float | None) -> MultiLease | Busy:
        sent = time.monotonic()
        row = await self._shared.connections.one(
            statements.acquire_all, (self.keys, self._owner, self._ttl, wait, self._lock_delay)
        )
        if row[0] is None:
            return Busy(None)
        fences = [int(f) for f in row[0]]
        grant = Grant(fences[0], row[1], row[2])
        renew_every = renewal_interval(self._ttl, self._renew_every) if self._watchdog else None
        return MultiLease(
            self._shared, statements, self._owner, list(self.keys), fences, grant, self._ttl, sent, renew_every
        )
