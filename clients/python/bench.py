"""What the client adds to an acquire+release pair: the client against the same SQL through
psycopg and psycopg_pool alone, 8 threads (and 8 asyncio tasks) at once, each taking and
releasing a key of its own per pair, in interleaved rounds on one server; the medians of the
rounds and the overhead ratio (client time per pair / raw time per pair; the target is <= 1.3).

    python bench.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--seconds 1 --rounds 5]

The client is used as users use it: its own pool, a 30 s lease renewed by its watchdog.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from typing import Any, Callable

from psycopg_pool import AsyncConnectionPool, ConnectionPool

import dlock_client
from dlock_client import aio

ACQUIRE = "SELECT dlock.dlock_acquire(%s, %s, '30 seconds')"
RELEASE = "SELECT dlock.dlock_release(%s, %s)"
POOL = 16


def threaded(workers: int, seconds: float, pair: Callable[[str], None]) -> float:
    """Pairs per second of ``workers`` threads looping over ``pair`` for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * workers

    def loop(w: int) -> None:
        prefix = f"bench/{uuid.uuid4().hex[:8]}/{w}/"
        while time.monotonic() < stop:
            pair(f"{prefix}{counts[w]}")
            counts[w] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=loop, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


async def tasks(workers: int, seconds: float, pair: Callable[[str], Any]) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * workers

    async def loop(w: int) -> None:
        prefix = f"bench/{uuid.uuid4().hex[:8]}/{w}/"
        while time.monotonic() < stop:
            await pair(f"{prefix}{counts[w]}")
            counts[w] += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(w) for w in range(workers)))
    return sum(counts) / (time.monotonic() - started)


def report(name: str, rates: dict[str, list[float]]) -> float:
    ratios = [raw / client for raw, client in zip(rates["raw"], rates["client"], strict=True)]
    ratio = statistics.median(ratios)
    print(f"{name}: client {statistics.median(rates['client']):.0f} pairs/s, "
          f"raw {statistics.median(rates['raw']):.0f} pairs/s, overhead {ratio:.3f}x "
          f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}){'' if ratio <= 1.3 else '  ABOVE 1.3x'}")
    return ratio


def bench_sync(dsn: str, workers: int, seconds: float, rounds: int) -> float:
    client = dlock_client.Client(dsn, pool_size=POOL)
    raw = ConnectionPool(dsn, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}, open=True)
    owner = f"bench:{uuid.uuid4().hex}"

    def with_client(key: str) -> None:
        client.lock(key).acquire().release()

    def with_raw(key: str) -> None:
        with raw.connection() as c:
            c.execute(ACQUIRE, (key, owner))
        with raw.connection() as c:
            c.execute(RELEASE, (key, owner))

    contenders = {"client": with_client, "raw": with_raw}
    for pair in contenders.values():
        threaded(workers, seconds / 2, pair)  # warm-up: connections, prepared statements
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name in (list(contenders) if r % 2 == 0 else list(reversed(contenders))):
            rates[name].append(threaded(workers, seconds, contenders[name]))
    client.close()
    raw.close()
    return report(f"python blocking, {workers} threads", rates)


async def bench_aio(dsn: str, workers: int, seconds: float, rounds: int) -> float:
    client = aio.Client(dsn, pool_size=POOL)
    raw = AsyncConnectionPool(dsn, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}, open=False)
    await raw.open()
    owner = f"bench:{uuid.uuid4().hex}"

    async def with_client(key: str) -> None:
        await (await client.lock(key).acquire()).release()

    async def with_raw(key: str) -> None:
        async with raw.connection() as c:
            await c.execute(ACQUIRE, (key, owner))
        async with raw.connection() as c:
            await c.execute(RELEASE, (key, owner))

    contenders = {"client": with_client, "raw": with_raw}
    for pair in contenders.values():
        await tasks(workers, seconds / 2, pair)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name in (list(contenders) if r % 2 == 0 else list(reversed(contenders))):
            rates[name].append(await tasks(workers, seconds, contenders[name]))
    await client.close()
    await raw.close()
    return report(f"python asyncio, {workers} tasks", rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bench_sync(args.dsn, args.workers, args.seconds, args.rounds)
    asyncio.run(bench_aio(args.dsn, args.workers, args.seconds, args.rounds))


if __name__ == "__main__":
    main()
