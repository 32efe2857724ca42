"""What a client and its ``with_owner`` copies share: the connections, the watchdog, the waits,
the schema's statements and the leases still held. A module of its own, which the leases, locks
and elections use without knowing the client."""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from .._sql import FIND, Statements
from ..errors import DlockError, NotInstalled
from .connections import Connections
from .listener import Listener
from .waiting import Waits
from .watchdog import Watchdog


class Releasable(Protocol):
    """A held lease, as far as closing the client needs it."""

    def release(self) -> bool: ...


class Shared:
    """What a client and its ``with_owner`` copies share, whatever their owner."""

    def __init__(self, connections: Connections, listen: Callable[[], tuple[str, dict[str, Any]]] | None,
                 max_poll_interval: float) -> None:
        self.connections = connections
        self.max_poll_interval = max_poll_interval
        self.watchdog = Watchdog()
        #: Leases not yet released, released by :meth:`Client.close`.
        self.held: set[Releasable] = set()
        self._closed = False
        self._statements: Statements | None = None
        self._finding = threading.Lock()

        def listener(waits: Waits) -> Listener:
            assert listen is not None
            return Listener(listen, waits.notified, waits.lost, waits.has_line)

        # Notifications cannot pass a transaction pooler: there waits retry.
        self.waits = Waits(listener if listen is not None else None, max_poll_interval)

    def statements(self) -> Statements:
        """The statements of this database, its extension's schema found on first use (and
        looked for again after a failure, e.g. before the extension was installed)."""
        statements = self._statements
        if statements is None:
            with self._finding:
                if self._statements is None:
                    database, schema = self.connections.one(FIND, ())
                    if schema is None:
                        raise NotInstalled(
                            f"the dlock extension is not installed in database {database!r} "
                            "(CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;)"
                        )
                    self._statements = Statements(schema)
                statements = self._statements
        return statements

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for lease in list(self.held):
            try:
                lease.release()
            except DlockError:
                pass  # it ends by its ttl, or with its session
        self.watchdog.close()
        if self.waits.listener is not None:
            self.waits.listener.close()
        self.connections.close()
