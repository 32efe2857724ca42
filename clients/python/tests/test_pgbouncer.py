"""Behind pgbouncer in transaction mode (4 server connections): nothing prepared, waits that
retry holding no server connection, and what cannot work there refused."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

import dlock_client
from dlock_client import aio


def test_locks_renewals_and_waits_work_through_the_pooler(client: Any, key: Any, pgbouncer_dsn: str) -> None:
    a = client(dsn=pgbouncer_dsn, pooler="transaction")
    b = client(dsn=f"{pgbouncer_dsn}?dlock_pooler=transaction")
    assert (a.pooler, b.pooler) == ("transaction", "transaction")
    for _ in range(30):  # prepared statements would fail here (26000) on another server connection
        with a.lock(key("many")) as lease:
            assert lease.holds()
    held = a.lock(key(), ttl=10).acquire()
    assert held.renew() is not None
    workers = [b.with_owner(f"w{i}-{uuid.uuid4().hex}") for i in range(20)]
    fences: list[int] = []

    def work(worker: dlock_client.Client) -> None:
        with worker.lock(key(), wait=30) as lease:
            fences.append(lease.fence)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    held.release()
    for t in threads:
        t.join(60)
    assert len(fences) == 20 and len(set(fences)) == 20


def test_what_needs_a_session_is_refused_behind_the_pooler(client: Any, key: Any, pgbouncer_dsn: str) -> None:
    a = client(dsn=pgbouncer_dsn, pooler="transaction")
    with pytest.raises(dlock_client.Unsupported):
        a.lock(key(), ttl=None).acquire()
    with pytest.raises(dlock_client.Unsupported):
        a.election(key("e")).observe()
    assert a.wait_free(key(), 0.1) is True


def test_the_asyncio_client_waits_through_the_pooler(key: Any, pgbouncer_dsn: str) -> None:
    async def scenario() -> None:
        async with aio.Client(pgbouncer_dsn, pooler="transaction") as a:
            held = await a.lock(key(), ttl=10).acquire()
            async def work(i: int) -> int:
                async with a.with_owner(f"w{i}-{uuid.uuid4().hex}").lock(key(), wait=30) as lease:
                    return lease.fence

            tasks = [asyncio.ensure_future(work(i)) for i in range(5)]
            await asyncio.sleep(0.1)
            await held.release()
            assert len(set(await asyncio.gather(*tasks))) == 5
            with pytest.raises(dlock_client.Unsupported):
                await a.lock(key("b"), ttl=None).acquire()

    asyncio.run(scenario())
