"""Elections: campaigning for the lead (``dlock_campaign``), the leadership that keeps it, who
leads now (``dlock_leader``), and observing changes of leader."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

from .. import _args
from .._model import Leader
from .._request import Request
from ..errors import NotAcquired, Unsupported
from .lease import Lease
from .lock import Lock
from .waiting import RECHECK, Watched

if TYPE_CHECKING:
    from .shared import Shared


class Election:
    """An election, by name: ``client.election("scheduler").campaign("node-a:8080")``.

    Its leader holds a lease on the election's name (the name shares the key space of locks:
    do not lock it as well). Its term is the lease's fence, so terms only grow, and work done
    as leader can be fenced with it (``dlock_holds(election, term)``).
    """

    def __init__(self, shared: Shared, owner: str, name: str, ttl: float, wait: float | None,
                 lock_delay: float) -> None:
        self._shared = shared
        self._owner = owner
        self.name = name
        self._ttl = ttl
        self._wait = wait
        self._lock_delay = lock_delay

    def campaign(self, info: str | None = None) -> Leadership:
        """Waits (the election's ``wait``; default without limit) to lead, publishing ``info``
        (at most 1 kB, e.g. the leader's address) to :meth:`leader`. The wait holds no pooled
        connection. Raises :class:`~dlock_client.NotAcquired` if the wait runs out."""
        request = Request(self.name, self._owner, "leader", self._ttl, info=_args.info(info),
                          lock_delay=self._lock_delay)
        lease = Lock(self._shared, request, self._wait, True, None).try_acquire()
        if lease is None:
            raise NotAcquired(self.name, waited=self._wait != 0.0)
        return Leadership(lease)

    def leader(self) -> Leader | None:
        """The current leader, or ``None`` when nobody leads."""
        statements = self._shared.statements()
        rows = self._shared.connections.rows(statements.leader, (self.name,))
        if not rows:
            return None
        info, term, since, expires_at = rows[0]
        return Leader(info, int(term), since, expires_at)

    def observe(self) -> LeaderChanges:
        """The leaders as they change: first the leader now (``None``: nobody leads), then every
        change the server notifies (a new term, or nobody). It watches the election on the
        client's listener connection; each change costs one short call on a pooled connection.
        :class:`~dlock_client.Unsupported` behind a transaction pooler (no notification passes
        it): poll :meth:`leader` there."""
        if not self._shared.waits.listens:
            raise Unsupported(
                "observing an election needs the client's listener connection, which a client "
                "behind a transaction pooler has not: poll leader() instead"
            )
        return LeaderChanges(self)

    def _watch(self) -> Watched:
        return Watched(self._shared.waits, self.name, self._shared.statements())


class Leadership:
    """The lead of an election, kept by the watchdog until resigned. Used as a context manager
    it resigns on exit, raising :class:`~dlock_client.LeaseLost` if the lead was lost before
    the block ended."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    @property
    def election(self) -> str:
        return self._lease.key

    @property
    def term(self) -> int:
        """The term: greater than every earlier leader's. Pass it with every write made as
        leader, so that a deposed leader's are refused (``dlock_holds(election, term)``)."""
        return self._lease.fence

    @property
    def lost(self) -> threading.Event:
        """Set when the lead is lost while still wanted: stop acting as leader."""
        return self._lease.lost

    @property
    def is_leading(self) -> bool:
        """Whether this process still leads as far as it knows (without asking the server)."""
        return self._lease.is_held

    @property
    def expires_at(self) -> datetime | None:
        return self._lease.expires_at

    def renew(self) -> datetime | None:
        """Renews the lead now; :class:`~dlock_client.LeaseLost` if it was lost."""
        return self._lease.renew()

    def holds(self) -> bool:
        """Whether the server still shows this term as the lead (``dlock_holds``)."""
        return self._lease.holds()

    def resign(self) -> bool:
        """Gives up the lead now, so that the next candidate takes over at once: ``True`` if it
        was still ours."""
        return self._lease.release()

    def __enter__(self) -> Leadership:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lease.__exit__(exc_type, exc, tb)


class LeaderChanges(Iterator["Leader | None"]):
    """The leaders of an election as they change (see :meth:`Election.observe`): iterate, or
    call :meth:`get` with a timeout. Changes that come faster than they are read are merged:
    each item is the leader when it was read, and differs from the one before. Close it (or use
    ``with``) to stop watching."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._watched = election._watch()
        self._last: tuple[int | None] | None = None

    def get(self, timeout: float | None = None) -> Leader | None:
        """The next leader (``None``: nobody leads), waiting up to ``timeout`` seconds for a
        change; :class:`TimeoutError` if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            leader = self._election.leader()
            term = (leader.term if leader is not None else None,)
            if term != self._last:
                self._last = term
                return leader
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"no change of leader of {self._election.name!r} within {timeout} s")
            # A safety net re-reads the leader now and then, should a notification go missing.
            pause = RECHECK if deadline is None else min(RECHECK, deadline - now)
            self._watched.changed(pause)

    def __next__(self) -> Leader | None:
        return self.get()

    def close(self) -> None:
        """Stops watching the election."""
        self._watched.close()

    def __enter__(self) -> LeaderChanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

