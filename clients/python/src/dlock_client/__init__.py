"""Python client of **dlock**, distributed locks inside PostgreSQL.

A :class:`Client` holds a connection pool and one owner identity (``host:pid:random``). A lock
is described with :meth:`Client.lock` and taken with ``with`` (or ``.acquire()``), which gives
a :class:`Lease`: it carries the fence token, is renewed by a watchdog every third of its ttl
while held, and sets its ``lost`` event if the lease is lost anyway::

    import dlock_client

    with dlock_client.Client("postgresql://app@db/app") as client:
        with client.lock("report:nightly", ttl=30, wait=10) as lease:
            write_report(fence=lease.fence)      # stop if lease.lost.is_set()

The same API for asyncio is in :mod:`dlock_client.aio`.
"""

from ._current import current_lease
from ._model import Leader, LiveLease
from ._sync.client import DEFAULT_POOL_SIZE, DEFAULT_TTL, Client
from ._sync.election import Election, LeaderChanges, Leadership
from ._sync.lease import Lease, MultiLease
from ._sync.lock import Lock, MultiLock
from .errors import (
    Cancelled,
    ConnectionFailed,
    Deadlock,
    DlockError,
    HeldHere,
    InvalidArgument,
    LeaseLost,
    ModeConflict,
    NotAcquired,
    NotInstalled,
    PermissionDenied,
    ServerError,
    Unsupported,
)

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_TTL",
    "Cancelled",
    "Client",
    "ConnectionFailed",
    "Deadlock",
    "DlockError",
    "Election",
    "HeldHere",
    "InvalidArgument",
    "Leader",
    "LeaderChanges",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LiveLease",
    "Lock",
    "ModeConflict",
    "MultiLease",
    "MultiLock",
    "NotAcquired",
    "NotInstalled",
    "PermissionDenied",
    "ServerError",
    "Unsupported",
    "current_lease",
]
