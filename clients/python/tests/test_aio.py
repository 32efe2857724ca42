"""The asyncio API against a real server: the same behaviour as the blocking one, awaited."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import dlock_client
from dlock_client import aio


def run(dsn: str, scenario: Callable[[Callable[..., aio.Client]], Awaitable[None]]) -> None:
    """Runs ``scenario`` with a factory of clients that are closed after it."""

    async def main() -> None:
        made: list[aio.Client] = []

        def make(**options: Any) -> aio.Client:
            made.append(aio.Client(options.pop("dsn", dsn), **options))
            return made[-1]

        try:
            await asyncio.wait_for(scenario(make), 60)
        finally:
            for c in made:
                await c.close()

    asyncio.run(main())


def test_a_lock_excludes_others_and_async_with_releases(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        a, b = client(), client()
        async with a.lock(key(), ttl=10) as lease:
            assert lease.fence > 0 and await lease.holds()
            assert await b.lock(key()).try_acquire() is None
            with pytest.raises(dlock_client.NotAcquired):
                await b.lock(key(), wait=0.2).acquire()
            again = await a.lock(key()).acquire()
            assert again.fence == lease.fence
            await again.release()
        after = await b.lock(key()).acquire()
        assert after.fence > lease.fence and await after.release()

    run(dsn, scenario)


def test_a_release_wakes_waiters_in_arrival_order(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        holder, a = client(), client(pool_size=2)
        blocker = await holder.lock(key(), ttl=60).acquire()
        order: list[int] = []

        async def work(i: int) -> None:
            async with a.with_owner(f"w{i}-{uuid.uuid4().hex}").lock(key(), wait=30):
                order.append(i)

        tasks = []
        for i in range(5):
            tasks.append(asyncio.ensure_future(work(i)))
            while not (a._shared.waits.has_line(key()) and a._shared.waits._lines[key()].users == i + 1):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the head is asleep on the listener
        released = time.monotonic()
        await blocker.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4]
        assert time.monotonic() - released < 3, "woken by notifications, not rechecks"

    run(dsn, scenario)


def test_lost_is_set_when_the_lease_is_force_released(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        a, admin_client = client(), client()
        with pytest.raises(dlock_client.LeaseLost):
            async with a.lock(key(), ttl=1.5) as lease:
                assert await admin_client.force_release(key())
                await asyncio.wait_for(lease.lost.wait(), 5)
        with pytest.raises(dlock_client.LeaseLost):
            await lease.renew()
        kept = await a.lock(key("kept"), ttl=1.2).acquire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(kept.lost.wait(), 3)
        assert await kept.holds()
        fixed = await a.lock(key("fixed"), ttl=1.0, watchdog=False).acquire()
        await asyncio.wait_for(fixed.lost.wait(), 5)
        assert not await fixed.release()

    run(dsn, scenario)


def test_the_async_decorator_and_current_lease(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        a, b = client(), client()

        @a.locked(key("job:{job}"), ttl=10)
        async def job(*, job: str) -> int:
            lease = aio.current_lease()
            assert lease is not None and lease.key == key(f"job:{job}")
            await asyncio.sleep(0)
            return lease.fence

        assert await job(job="1") > 0
        blocker = await b.lock(key("job:2")).acquire()
        with pytest.raises(dlock_client.NotAcquired):
            await job(job="2")
        await blocker.release()

    run(dsn, scenario)


def test_primitives_shared_semaphore_multi_key_session_bound(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        a, b, c = client(), client(), client()
        r1 = await a.lock(key("rw")).shared().acquire()
        r2 = await b.lock(key("rw")).shared().acquire()
        assert await c.lock(key("rw")).try_acquire() is None
        with pytest.raises(dlock_client.ModeConflict):
            await a.lock(key("rw")).acquire()
        writer = asyncio.ensure_future(c.lock(key("rw"), wait=10).acquire())
        await r1.release()
        await r2.release()
        assert (await writer).fence > r2.fence
        p1 = await a.semaphore(key("sem"), 2).acquire()
        await b.semaphore(key("sem"), 2).acquire()
        assert await c.semaphore(key("sem"), 2).try_acquire() is None
        await p1.release()
        assert await c.semaphore(key("sem"), 2).try_acquire() is not None
        both = await a.lock_all([key("x"), key("y")]).acquire()
        assert len(both.fences) == 2 and await both.holds()
        assert await b.lock_all([key("y"), key("x")]).try_acquire() is None
        assert await both.release()
        bound = await a.lock(key("bound"), ttl=None).acquire()
        assert bound.session_bound and await bound.renew() is None
        assert await bound.release()

    run(dsn, scenario)


def test_elections_observed_with_async_for_and_wait_free(dsn: str, key: Any) -> None:
    async def scenario(client: Callable[..., aio.Client]) -> None:
        a, b, watcher = client(), client(), client()
        changes = await watcher.election(key("e")).observe()
        seen: list[Any] = []

        async def observe() -> None:
            async for leader in changes:
                seen.append(None if leader is None else leader.info)
                if seen[-2:] == ["b", None]:
                    return

        observer = asyncio.ensure_future(observe())
        while not seen:  # nobody leads yet
            await asyncio.sleep(0.01)
        lead = await a.election(key("e")).campaign("a")
        follower = asyncio.ensure_future(b.election(key("e")).campaign("b"))
        while not seen or seen[-1] != "a":
            await asyncio.sleep(0.01)
        await lead.resign()
        next_lead = await follower
        assert next_lead.term > lead.term
        assert (await watcher.election(key("e")).leader()).info == "b"  # type: ignore[union-attr]
        while seen[-1] != "b":  # the observer has seen b lead before b resigns
            await asyncio.sleep(0.01)
        await next_lead.resign()
        await asyncio.wait_for(observer, 10)
        changes.close()
        assert seen[0] is None and "a" in seen and seen[-2:] == ["b", None]
        held = await a.lock(key("free")).acquire()
        assert not await b.wait_free(key("free"), 0.2)
        free = asyncio.ensure_future(b.wait_free(key("free"), 20))
        await asyncio.sleep(0.1)
        await held.release()
        assert await asyncio.wait_for(free, 5)

    run(dsn, scenario)
