"""The conformance actions over the asyncio API, ``dlock_client.aio``: every call runs on one
event loop in a thread of its own, the scenario's steps waiting for it from theirs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine, TypeVar


from dlock_client import aio
from psycopg_pool import AsyncConnectionPool

from api_sync import classify

T = TypeVar("T")


class Adapter:
    """One scenario's clients, on the asyncio API."""

    classify = staticmethod(classify)

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aio-loop", daemon=True)
        self._thread.start()
        self._pools: list[AsyncConnectionPool] = []

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def client(self, dsn: str, *, pooler: str, driver_pool: bool, pool_size: int, owner: str | None) -> aio.Client:
        async def make() -> aio.Client:
            if driver_pool:
                pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, open=False)
                await pool.open()
                self._pools.append(pool)
                return aio.Client(pool=pool, pooler=pooler, owner=owner)
            return aio.Client(dsn, pool_size=pool_size, pooler=pooler, owner=owner)

        return self._run(make())

    def owner(self, client: aio.Client) -> str:
        return client.owner

    def close(self, client: aio.Client) -> None:
        self._run(client.close())

    def shutdown(self) -> None:
        for pool in self._pools:
            self._run(pool.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _lock(self, client: aio.Client, key: Any, ttl: Any, wait: Any, mode: str, permits: Any,
              watchdog: bool, lock_delay: float) -> aio.Lock:
        if permits is not None:
            return client.semaphore(key, permits, ttl=ttl, wait=wait, watchdog=watchdog)
        lock = client.lock(key, ttl=ttl, wait=wait, watchdog=watchdog, lock_delay=lock_delay)
        return lock.shared() if mode == "shared" else lock

    def lock(self, client: aio.Client, **args: Any) -> aio.Lease:
        async def take() -> aio.Lease:
            return await self._lock(client, **args).acquire()

        return self._run(take())

    def lock_all(self, client: aio.Client, keys: Any, ttl: float, wait: float | None) -> aio.MultiLease:
        async def take() -> aio.MultiLease:
            return await client.lock_all(keys, ttl=ttl, wait=wait).acquire()

        return self._run(take())

    def with_lock(self, client: aio.Client, body: Callable[[Any], None], **args: Any) -> None:
        async def hold() -> None:
            async with self._lock(client, **args) as lease:
                # The steps run in a thread, from which they call back into this loop.
                await asyncio.get_running_loop().run_in_executor(None, body, lease)

        self._run(hold())

    def fences(self, lease: Any) -> list[int]:
        if isinstance(lease, aio.MultiLease):
            return lease.fences
        if isinstance(lease, aio.Leadership):
            return [lease.term]
        return [lease.fence]

    def release(self, lease: aio.Lease) -> bool:
        return self._run(lease.release())

    def renew(self, lease: aio.Lease) -> None:
        self._run(lease.renew())

    def holds(self, lease: aio.Lease) -> bool:
        return self._run(lease.holds())

    def is_held(self, lease: aio.Lease) -> bool:
        return lease.is_held

    def wait_lost(self, lease: aio.Lease, timeout: float) -> bool:
        async def wait() -> bool:
            try:
                await asyncio.wait_for(lease.lost.wait(), timeout)
                return True
            except asyncio.TimeoutError:
                return False

        return self._run(wait())

    def campaign(self, client: aio.Client, election: Any, info: Any, ttl: float, wait: float | None) -> aio.Leadership:
        return self._run(client.election(election, ttl=ttl, wait=wait).campaign(info))

    def resign(self, lead: aio.Leadership) -> bool:
        return self._run(lead.resign())

    def leader(self, client: aio.Client, election: Any) -> dict[str, Any] | None:
        leader = self._run(client.election(election).leader())
        return None if leader is None else {"info": leader.info, "term": leader.term}

    def observe(self, client: aio.Client, election: Any) -> aio.LeaderChanges:
        return self._run(client.election(election).observe())

    def observe_next(self, changes: aio.LeaderChanges, timeout: float) -> dict[str, Any] | None:
        leader = self._run(changes.get(timeout))
        return None if leader is None else {"info": leader.info, "term": leader.term}

    def stop_observing(self, changes: aio.LeaderChanges) -> None:
        self._loop.call_soon_threadsafe(changes.close)

    def wait_free(self, client: aio.Client, key: Any, timeout: float | None) -> bool:
        return self._run(client.wait_free(key, timeout))

    def force_release(self, client: aio.Client, key: Any) -> bool:
        return self._run(client.force_release(key))



