"""The asyncio API of the dlock client: the same names as :mod:`dlock_client`, awaited::

    from dlock_client import aio

    async with aio.Client("postgresql://app@db/app") as client:
        async with client.lock("report:nightly", ttl=30, wait=10) as lease:
            await write_report(fence=lease.fence)    # lease.lost is an asyncio.Event

The exceptions are :mod:`dlock_client`'s.
"""

from .._current import current_lease
from .._model import Leader, LiveLease
from .client import Client
from .election import Election, LeaderChanges, Leadership
from .lease import Lease, MultiLease
from .lock import Lock, MultiLock

__all__ = [
    "Client",
    "Election",
    "Leader",
    "LeaderChanges",
    "Leadership",
    "Lease",
    "LiveLease",
    "Lock",
    "MultiLease",
    "MultiLock",
    "current_lease",
]
