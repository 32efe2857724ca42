"""The asyncio client (the twin of ``dlock_client.Client``): a connection pool, one owner
identity, and what its locks share (the listener their waits use)."""

from __future__ import annotations

import functools
import inspect
import time
from types import TracebackType
from typing import Any, Awaitable, Callable, ParamSpec, TypeVar

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool


from .. import _args, _conninfo, _owner
from .._backoff import DEFAULT_MAX_POLL_INTERVAL
from .._current import _current, formatted_key
from .._model import Busy, LiveLease
from .._request import Request
from ..errors import HeldHere
from .._sync.client import DEFAULT_POOL_SIZE, DEFAULT_TTL
from .connections import Connections
from .shared import Shared
from .election import Election
from .lock import Lock, MultiLock
from .waiting import RECHECK, Watched, retry

P = ParamSpec("P")
R = TypeVar("R")



async def _value(value: Any) -> Any:
    """A value, or what a function (sync or async) that stands for it returns."""
    if callable(value):
        value = value()
    if inspect.isawaitable(value):
        value = await value
    return value


def _connect_with(pool: AsyncConnectionPool) -> Callable[[], Awaitable[tuple[str, dict[str, Any]]]]:
    """What the listener connects with: the pool's conninfo and kwargs, which psycopg_pool lets
    be (async) functions returning them, so they are read at each connect."""

    async def connect_with() -> tuple[str, dict[str, Any]]:
        return str(await _value(pool.conninfo)), dict(await _value(pool.kwargs) or {})

    return connect_with


class Client:
    """A dlock client for asyncio: a pool of connections to one database and one owner
    identity. The same arguments as :class:`dlock_client.Client`, with an
    :class:`psycopg_pool.AsyncConnectionPool` for ``pool``; every call is awaited, and locks,
    leases and elections are used with ``async with``.

    ``Client(dsn)`` takes a libpq connection string (URL or ``key=value``; ``""`` takes
    everything from the ``PG*`` environment) and opens no connection before the first call.
    ``Client(pool=...)`` uses a :class:`psycopg_pool.ConnectionPool` of yours (give it
    ``kwargs={"autocommit": True}``, or each call runs in a transaction of its own); its waits
    still share one listener connection, opened with the pool's conninfo.

    Behind pgbouncer in transaction mode say so, with ``pooler="transaction"`` or
    ``dlock_pooler=transaction`` in the connection string: nothing is prepared, waits retry
    instead of listening, and session-bound leases are refused.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool | None = None,
        owner: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        pooler: str | None = None,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        _shared: Shared | None = None,
    ) -> None:
        self._owner = _args.owner(owner) if owner is not None else _owner.generate()
        self._owns_shared = _shared is None
        if _shared is not None:
            self._shared = _shared
            return
        if dsn is not None and pool is not None:
            raise TypeError("dlock: give a connection string or a pool, not both")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool):
            raise TypeError("dlock: pool_size must be an int")
        if pool_size < 1:
            raise ValueError("dlock: a pool of no connections cannot lock anything")
        max_poll = _args.positive("max_poll_interval", max_poll_interval)
        if pool is None:
            if dsn is not None and not isinstance(dsn, str):
                raise TypeError(f"dlock: the connection string must be a str, not {type(dsn).__name__}")
            conninfo, in_string = _conninfo.split(dsn or "")
            mode = _conninfo.pooler_mode(pooler or in_string)
            kwargs: dict[str, Any] = {"autocommit": True}
            if "application_name" not in conninfo_to_dict(conninfo):
                kwargs["application_name"] = "dlock"
            if mode == "transaction":
                kwargs["prepare_threshold"] = None
            pool = AsyncConnectionPool(conninfo, min_size=1, max_size=pool_size, kwargs=kwargs, open=False, name="dlock")
            owns_pool = True
        else:
            owns_pool = False
            mode = _conninfo.pooler_mode(pooler)
        transaction = mode == "transaction"
        connections = Connections(pool, transaction_pooler=transaction, owns_pool=owns_pool)
        self._shared = Shared(connections, None if transaction else _connect_with(pool), max_poll)

    def with_owner(self, owner: str) -> Client:
        """The same pool, listener and watchdog under another owner identity (e.g. tasks of one
        process that should count separately on a semaphore). Owners must be unguessable to
        others: whoever knows one (and has the role) can renew and release its leases."""
        return Client(owner=owner, _shared=self._shared)

    @property
    def owner(self) -> str:
        """The owner identity every lease of this client is taken as: ``host:pid:random``
        unless given."""
        return self._owner

    @property
    def pooler(self) -> str:
        """``"session"`` (direct, or a session pooler) or ``"transaction"``."""
        return "transaction" if self._shared.connections.transaction_pooler else "session"

    @property
    def pool(self) -> AsyncConnectionPool:
        """The connection pool."""
        return self._shared.connections.pool

    async def extension_schema(self) -> str:
        """The schema the extension lives in (looked up on first use, like every call)."""
        return (await self._shared.statements()).schema

    def lock(
        self,
        key: str,
        *,
        ttl: _args.Seconds | None = DEFAULT_TTL,
        wait: _args.Seconds | None = 0.0,
        watchdog: bool = True,
        renew_every: _args.Seconds | None = None,
        lock_delay: _args.Seconds = 0.0,
    ) -> Lock:
        """Describes an exclusive lock on ``key``; take it with ``with``, :meth:`Lock.acquire`
        or :meth:`Lock.try_acquire`, and ``.shared()`` makes it a read lock.

        ``ttl`` (seconds or a timedelta; default 30 s): how long the lease outlives its holder;
        ``None`` binds it to its connection instead (kept out of the pool while held).
        ``wait``: how long to wait for the key (0, the default: one try; ``None``: no limit).
        ``watchdog``: renew every ``renew_every`` (a third of the ttl) while held.
        ``lock_delay``: should the lease expire rather than be released, keep the key from new
        grants this long after.
        """
        request = Request(
            _args.key(key), self._owner, "exclusive", _args.ttl(ttl),
            lock_delay=_args.seconds("lock_delay", lock_delay),
        )
        return self._lock(request, wait, watchdog, renew_every)

    def semaphore(
        self,
        key: str,
        permits: int,
        *,
        ttl: _args.Seconds | None = DEFAULT_TTL,
        wait: _args.Seconds | None = 0.0,
        watchdog: bool = True,
        renew_every: _args.Seconds | None = None,
    ) -> Lock:
        """Describes one permit of a counting semaphore of ``permits`` on ``key``: a shared
        lease granted only while fewer than ``permits`` owners hold the key. Everyone using
        the key must pass the same number. Each holder is an owner: threads of one process
        that should count separately need a client each (:meth:`with_owner`)."""
        request = Request(_args.key(key), self._owner, "shared", _args.ttl(ttl), permits=_args.permits(permits))
        return self._lock(request, wait, watchdog, renew_every)

    def _lock(self, request: Request, wait: object, watchdog: bool, renew_every: object) -> Lock:
        if not isinstance(watchdog, bool):
            raise TypeError("dlock: watchdog must be a bool")
        every = None if renew_every is None else _args.positive("renew_every", renew_every)
        return Lock(self._shared, request, _args.wait(wait), watchdog, every)

    def lock_all(
        self,
        keys: list[str] | tuple[str, ...],
        *,
        ttl: _args.Seconds = DEFAULT_TTL,
        wait: _args.Seconds | None = 0.0,
        watchdog: bool = True,
        renew_every: _args.Seconds | None = None,
        lock_delay: _args.Seconds = 0.0,
    ) -> MultiLock:
        """Describes a lock on every key of ``keys`` at once, all or none (at most 64); the
        lease's fences come in the order of ``keys``."""
        every = None if renew_every is None else _args.positive("renew_every", renew_every)
        return MultiLock(
            self._shared, self._owner, _args.keys(keys), _args.positive("ttl", ttl), _args.wait(wait),
            bool(watchdog), every, _args.seconds("lock_delay", lock_delay),
        )

    def election(
        self,
        name: str,
        *,
        ttl: _args.Seconds = DEFAULT_TTL,
        wait: _args.Seconds | None = None,
        lock_delay: _args.Seconds = 0.0,
    ) -> Election:
        """The election ``name``: campaign for its lead, see who leads, observe changes.
        ``ttl``: how long a dead leader keeps the lead; ``wait``: how long :meth:`Election.campaign`
        waits to lead (default: without limit)."""
        return Election(
            self._shared, self._owner, _args.key(name), _args.positive("ttl", ttl), _args.wait(wait),
            _args.seconds("lock_delay", lock_delay),
        )

    def locked(
        self,
        key: str,
        *,
        ttl: _args.Seconds | None = DEFAULT_TTL,
        wait: _args.Seconds | None = 0.0,
        shared: bool = False,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """A decorator that runs the function under a lock on ``key`` formatted with the call's
        arguments (``@client.locked("report:{0}", ttl=60)``). A busy key raises
        :class:`~dlock_client.NotAcquired`; a lease lost before the function returned raises
        :class:`~dlock_client.LeaseLost` after it. Inside, :func:`dlock_client.current_lease`
        gives the lease (its fence, its ``lost`` event)."""
        if not isinstance(key, str):
            raise TypeError(f"dlock: the key template must be a str, not {type(key).__name__}")
        ttl_checked, wait_checked = _args.ttl(ttl), _args.wait(wait)

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            @functools.wraps(function)
            async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
                lock = self.lock(formatted_key(key, args, kwargs), ttl=ttl_checked, wait=wait_checked)
                async with (lock.shared() if shared else lock) as lease:
                    token = _current.set(lease)
                    try:
                        return await function(*args, **kwargs)
                    finally:
                        _current.reset(token)

            return locked_call

        return decorate

    async def wait_free(self, key: str, timeout: _args.Seconds | None) -> bool:
        """Waits up to ``timeout`` (``None``: no limit) until no lease holds ``key``, without
        taking it: ``True`` once it is free, ``False`` if the timeout elapsed first (zero:
        look once). Like a lock's wait it holds no pooled connection. Raises
        :class:`~dlock_client.HeldHere` if the server session that looks holds the key itself
        (behind a transaction pooler, where the session is whichever the pooler lent, that only
        means the key is held)."""
        key = _args.key(key)
        wait = _args.wait(timeout)
        shared = self._shared
        statements = await shared.statements()

        async def look() -> tuple[bool, float | None]:
            try:
                free, retry_after = await shared.connections.one(statements.is_free, (key,))
            except HeldHere:
                if not shared.connections.transaction_pooler:
                    raise
                # Behind a transaction pooler the session that looked is whichever the pooler
                # lent, maybe one that took a lease of the key for another client: held, no more.
                return False, None
            return bool(free), None if retry_after is None else max(float(retry_after), 0.0)

        if wait == 0.0:
            return (await look())[0]
        deadline = None if wait is None else time.monotonic() + wait

        if not shared.waits.listens:
            async def attempt(_: float | None) -> bool | Busy:
                free, retry_after = await look()
                return True if free else Busy(retry_after)

            return await retry(deadline, shared.max_poll_interval, attempt) is not None
        watched = await Watched(shared.waits, key, statements).start()
        try:
            while True:
                free, retry_after = await look()
                now = time.monotonic()
                if free:
                    return True
                if deadline is not None and now >= deadline:
                    return False
                pause = RECHECK if retry_after is None else retry_after
                await watched.changed(pause if deadline is None else min(pause, deadline - now))
        finally:
            watched.close()

    async def locks(self) -> list[LiveLease]:
        """The live leases (``dlock_locks``), ordered by key. Owners of other roles' leases are
        ``None`` unless the role is a ``dlock_admin`` member or a superuser."""
        statements = await self._shared.statements()
        return [
            LiveLease(r[0], r[1], int(r[2]), int(r[3]), r[4], r[5], int(r[6]), r[7])
            for r in await self._shared.connections.rows(statements.locks, ())
        ]

    async def force_release(self, key: str) -> bool:
        """Frees ``key`` whoever holds it: ``True`` if it was held. For administrators
        (``dlock_admin`` members, superusers); :class:`~dlock_client.PermissionDenied`
        otherwise. The holder finds out at its next renewal."""
        key = _args.key(key)
        statements = await self._shared.statements()
        return bool((await self._shared.connections.one(statements.force_release, (key,)))[0])

    async def close(self) -> None:
        """Releases the leases still held (best effort), which stops their watchdogs, and
        closes the listener and the pool (if it is the client's own). A ``with_owner`` copy
        closes nothing: its original does."""
        if self._owns_shared:
            await self._shared.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
