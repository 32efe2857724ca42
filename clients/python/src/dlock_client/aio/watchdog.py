"""The watchdog of a TTL lease (the asyncio twin of ``dlock_client._sync.watchdog``): a task
per lease that renews it at its interval and declares it lost when a renewal is refused or the
local deadline passes first, even while a renewal is still on its way."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, Awaitable, Protocol

from .._schedule import Due, Schedule
from ..errors import DlockError, is_transient


class Watched(Protocol):
    """What the watchdog needs of a lease."""

    schedule: Schedule
    ended_event: asyncio.Event

    def renew_ttl(self) -> Awaitable[datetime | None]:
        """One renewal: the new expiry, or ``None`` if the lease is no longer ours."""

    def mark_lost(self, reason: str) -> None:
        """Tells the lease's holder it is lost."""


def spawn(lease: Watched) -> asyncio.Task[None]:
    """Starts the watchdog of ``lease`` on the running loop."""
    return asyncio.get_running_loop().create_task(run(lease), name="dlock-watchdog")


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A renewal abandoned at the deadline: its outcome no longer matters, but must be read.
    if not task.cancelled():
        task.exception()


async def run(lease: Watched) -> None:
    schedule = lease.schedule
    ended = lease.ended_event
    while True:
        try:
            await asyncio.wait_for(ended.wait(), max(schedule.next_wake() - time.monotonic(), 0.0))
            return
        except asyncio.TimeoutError:
            pass
        due = schedule.due(time.monotonic())
        if due is Due.LOST:
            lease.mark_lost("the ttl ran out before the lease was renewed")
            return
        if due is Due.SLEEP:
            continue
        sent = time.monotonic()
        renewal: asyncio.Future[datetime | None] = asyncio.ensure_future(lease.renew_ttl())
        ending = asyncio.ensure_future(ended.wait())
        both: set[asyncio.Future[Any]] = {renewal, ending}
        try:
            await asyncio.wait(both, timeout=max(schedule.deadline - sent, 0.0),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ending.cancel()
        if ended.is_set() or not renewal.done():
            renewal.add_done_callback(_retrieve)
            if not ended.is_set():
                lease.mark_lost("no renewal answered before the ttl ran out")
            return
        failure = renewal.exception()
        now = time.monotonic()
        if failure is None and renewal.result() is not None:
            schedule.renewed(sent, now)
        elif isinstance(failure, DlockError) and is_transient(failure):
            # The connection may come back before the deadline: retry sooner.
            schedule.retry_soon(now)
        else:
            reason = "renewal answered that the lease is no longer ours" if failure is None else f"renewal failed: {failure}"
            lease.mark_lost(reason)
            return
