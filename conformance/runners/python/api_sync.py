"""The conformance actions over the blocking API, ``dlock_client``."""

from __future__ import annotations

from typing import Any, Callable

import dlock_client as dl
from psycopg_pool import ConnectionPool

#: The scenario's error kinds of the client's exceptions (the most specific first).
KINDS: list[tuple[type[BaseException], str]] = [
    (dl.NotAcquired, "NotAcquired"),
    (dl.LeaseLost, "LeaseLost"),
    (dl.InvalidArgument, "InvalidArgument"),
    (dl.ModeConflict, "ModeConflict"),
    (dl.PermissionDenied, "PermissionDenied"),
    (dl.HeldHere, "HeldHere"),
    (dl.Unsupported, "Unsupported"),
    (TypeError, "WrongType"),
    (TimeoutError, "Timeout"),
    (dl.ServerError, "Server"),
]


def classify(error: BaseException) -> tuple[str, str | None] | None:
    for kind, name in KINDS:
        if isinstance(error, kind):
            return name, getattr(error, "sqlstate", None)
    return None


class Adapter:
    """One scenario's clients, on the blocking API."""

    classify = staticmethod(classify)

    def __init__(self) -> None:
        self._pools: list[ConnectionPool] = []

    def client(self, dsn: str, *, pooler: str, driver_pool: bool, pool_size: int, owner: str | None) -> dl.Client:
        if driver_pool:
            pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, open=True)
            self._pools.append(pool)
            return dl.Client(pool=pool, pooler=pooler, owner=owner)
        return dl.Client(dsn, pool_size=pool_size, pooler=pooler, owner=owner)

    def owner(self, client: dl.Client) -> str:
        return client.owner

    def close(self, client: dl.Client) -> None:
        client.close()

    def shutdown(self) -> None:
        for pool in self._pools:
            pool.close()

    def _lock(self, client: dl.Client, key: Any, ttl: Any, wait: Any, mode: str, permits: Any,
              watchdog: bool, lock_delay: float) -> dl.Lock:
        if permits is not None:
            return client.semaphore(key, permits, ttl=ttl, wait=wait, watchdog=watchdog)
        lock = client.lock(key, ttl=ttl, wait=wait, watchdog=watchdog, lock_delay=lock_delay)
        return lock.shared() if mode == "shared" else lock

    def lock(self, client: dl.Client, **args: Any) -> dl.Lease:
        return self._lock(client, **args).acquire()

    def lock_all(self, client: dl.Client, keys: Any, ttl: float, wait: float | None) -> dl.MultiLease:
        return client.lock_all(keys, ttl=ttl, wait=wait).acquire()

    def with_lock(self, client: dl.Client, body: Callable[[Any], None], key: Any, ttl: Any, wait: Any,
                  mode: str, permits: Any, watchdog: bool, lock_delay: float) -> None:
        # The decorator, the blocking API's declarative way: the key is its template filled in.
        @client.locked("{0}", ttl=ttl, wait=wait, shared=mode == "shared")
        def work(key: str) -> None:
            body(dl.current_lease())

        work(key)

    def fences(self, lease: Any) -> list[int]:
        if isinstance(lease, dl.MultiLease):
            return lease.fences
        if isinstance(lease, dl.Leadership):
            return [lease.term]
        return [lease.fence]

    def release(self, lease: dl.Lease) -> bool:
        return lease.release()

    def renew(self, lease: dl.Lease) -> None:
        lease.renew()

    def holds(self, lease: dl.Lease) -> bool:
        return lease.holds()

    def is_held(self, lease: dl.Lease) -> bool:
        return lease.is_held

    def wait_lost(self, lease: dl.Lease, timeout: float) -> bool:
        return lease.lost.wait(timeout)

    def campaign(self, client: dl.Client, election: Any, info: Any, ttl: float, wait: float | None) -> dl.Leadership:
        return client.election(election, ttl=ttl, wait=wait).campaign(info)

    def resign(self, lead: dl.Leadership) -> bool:
        return lead.resign()

    def leader(self, client: dl.Client, election: Any) -> dict[str, Any] | None:
        leader = client.election(election).leader()
        return None if leader is None else {"info": leader.info, "term": leader.term}

    def observe(self, client: dl.Client, election: Any) -> dl.LeaderChanges:
        return client.election(election).observe()

    def observe_next(self, changes: dl.LeaderChanges, timeout: float) -> dict[str, Any] | None:
        leader = changes.get(timeout)
        return None if leader is None else {"info": leader.info, "term": leader.term}

    def stop_observing(self, changes: dl.LeaderChanges) -> None:
        changes.close()

    def wait_free(self, client: dl.Client, key: Any, timeout: float | None) -> bool:
        return client.wait_free(key, timeout)

    def force_release(self, client: dl.Client, key: Any) -> bool:
        return client.force_release(key)
