"""A held lease: its fence, the ``lost`` event, renewing, checking and giving it back."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psycopg

from .._model import Grant
from .._schedule import Schedule
from .._sql import Statements
from ..errors import ConnectionFailed, DlockError, LeaseLost

if TYPE_CHECKING:
    from .shared import Shared

log = logging.getLogger("dlock_client")


class Lease:
    """A held lock: one hold of a lease (a reentrant acquire by the same owner gives another
    ``Lease`` with the same fence and one more hold; the key is free once every one has let go).

    While it is held, a watchdog renews it every third of its ttl; :attr:`lost` is set if it is
    lost anyway (a renewal answered that it is no longer ours, or no renewal got through before
    its ttl ran out). Used as a context manager it is released on exit, and the ``with`` block
    raises :class:`~dlock_client.LeaseLost` if the lease was lost before the block ended
    (whatever the block did may have overlapped another holder's work).
    """

    def __init__(
        self,
        shared: Shared,
        statements: Statements,
        owner: str,
        key: str,
        grant: Grant,
        ttl: float | None,
        sent: float,
        renew_every: float | None,
        session: psycopg.Connection[Any] | None,
    ) -> None:
        self._shared = shared
        self._statements = statements
        self._owner = owner
        self._key = key
        self._fence = grant.fence
        self._ttl = ttl
        self._session = session
        #: Set when the lease is lost while it is still wanted; never on release.
        self.lost = threading.Event()
        #: Whether the holder let go (released, or its client closed): stops the watchdog.
        self.ended = False
        self._released = False
        if ttl is None:
            self._expires_at: datetime | None = None
            self.schedule = Schedule(float("inf"), float("inf"), None, sent)
        else:
            # The server's expiry is its grant time plus the ttl; the local deadline is no
            # later than it (the grant happened at most `server_elapsed` after `sent`).
            self._expires_at = grant.server_now + timedelta(seconds=ttl)
            self.schedule = Schedule(ttl, sent + grant.server_elapsed + ttl, renew_every, sent)
            shared.watchdog.watch(self)
        shared.held.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self._key!r} fence={self._fence} held={self.is_held}>"

    @property
    def key(self) -> str:
        """The locked key (for a multi-key lease, its keys joined with ``", "``)."""
        return self._key

    @property
    def fence(self) -> int:
        """The fence token: larger than any earlier grant's of this key. Pass it with every
        write the lock protects (``... WHERE dlock_holds(key, fence)``), so that a stale
        holder's are refused."""
        return self._fence

    @property
    def owner(self) -> str:
        """The owner identity the lease is held as."""
        return self._owner

    @property
    def session_bound(self) -> bool:
        """Whether the lease has no ttl and ends with its connection (which it keeps)."""
        return self._ttl is None

    @property
    def expires_at(self) -> datetime | None:
        """When the lease ends unless renewed, as last known (server clock); ``None`` if
        session-bound."""
        return self._expires_at

    @property
    def is_held(self) -> bool:
        """Whether the lease is still ours as far as this process knows, without asking the
        server: not released, not lost, and its ttl not run out by the local clock."""
        return not (self.lost.is_set() or self.ended) and time.monotonic() < self.schedule.deadline

    def mark_lost(self, reason: str) -> None:
        """Sets :attr:`lost` (once), unless the holder already let go."""
        if not self.ended and not self.lost.is_set():
            log.warning("dlock: lease lost: key=%s fence=%s: %s", self._key, self._fence, reason)
            self.lost.set()

    def renew(self) -> datetime | None:
        """Renews the lease now for another ttl: the new expiry (``None`` for a session-bound
        lease, which is only checked). Raises :class:`~dlock_client.LeaseLost` if it is no
        longer ours, which also sets :attr:`lost`."""
        if self._ttl is None:
            try:
                held = self.holds()
            except ConnectionFailed:
                # The lease's session is what kept it: with the session gone, so is the lease.
                if self._session is None or not self._session.closed:
                    raise
                held = False
            if not held:
                self.mark_lost("the session-bound lease is gone")
                raise LeaseLost(f"the lease on {self._key!r} is gone")
            return None
        sent = time.monotonic()
        expiry = self.renew_ttl()
        if expiry is None:
            self.mark_lost("renewal answered that the lease is no longer ours")
            raise LeaseLost(f"the lease on {self._key!r} is no longer ours")
        self._shared.watchdog.extended(self, sent)
        return expiry

    def renew_ttl(self) -> datetime | None:
        """One renewal through the pool: the new expiry, or ``None`` if no longer ours."""
        assert self._ttl is not None
        expiry: datetime | None = self._shared.connections.one(
            self._statements.renew, (self._key, self._owner, self._ttl)
        )[0]
        if expiry is not None:
            self._expires_at = expiry
        return expiry

    def holds(self) -> bool:
        """Asks the server whether the live lease on the key still carries this fence
        (``dlock_holds``). Changes nothing."""
        return bool(self._call(self._statements.holds, (self._key, self._fence))[0])

    def release(self) -> bool:
        """Gives this hold back now: ``True`` if the lease was still ours, ``False`` if it had
        already ended (expired, force-released) or was released before."""
        if self._released:
            return False
        self._released = True
        self.ended = True
        self._shared.watchdog.forget(self)
        self._shared.held.discard(self)
        session, self._session = self._session, None
        try:
            return self._release_call(session)
        except DlockError:
            if session is not None:
                # Not sure the release happened: closing the session ends the lease anyway.
                session.close()
            raise
        finally:
            if session is not None:
                self._shared.connections.give_back(session)

    def _release_call(self, session: psycopg.Connection[Any] | None) -> bool:
        if session is None:
            row = self._shared.connections.one(self._statements.release, (self._key, self._owner))
        else:
            row = self._shared.connections.run(session, self._statements.release, (self._key, self._owner))[0]
        return bool(row[0])

    def _call(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
        """One statement on the lease's own session if it has one, else through the pool."""
        if self._session is not None:
            return self._shared.connections.run(self._session, sql, params)[0]
        return self._shared.connections.one(sql, params)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lost_during_work = not self.is_held
        try:
            still_ours = self.release()
        except DlockError as e:
            # The work finished while the lease was live as far as we know; it ends by its ttl
            # (or with its session) without us.
            log.warning("dlock: release of %s after its block failed: %s", self._key, e)
            still_ours = True
        if exc_type is None and (lost_during_work or not still_ours):
            raise LeaseLost(f"the lease on {self._key!r} was lost before its block ended")


class MultiLease(Lease):
    """Every key of a multi-key lock, held together: one watchdog renews them all, :attr:`lost`
    is set if any of them is lost, and releasing gives back all of them.

    Renewals and releases go key by key, each in a transaction of its own, so that they never
    hold one key's lock while waiting for another's (no cycle with a concurrent multi-key grant
    of the same keys, whatever order the server locks them in).
    """

    def __init__(self, shared: Shared, statements: Statements, owner: str, keys: list[str],
                 fences: list[int], grant: Grant, ttl: float, sent: float,
                 renew_every: float | None) -> None:
        self._keys = keys
        self._fences = fences
        super().__init__(shared, statements, owner, ", ".join(keys), grant, ttl, sent, renew_every, None)

    @property
    def keys(self) -> list[str]:
        """The keys, in the order they were asked for."""
        return list(self._keys)

    @property
    def fences(self) -> list[int]:
        """The fence of each key, in the order of :attr:`keys`."""
        return list(self._fences)

    def renew_ttl(self) -> datetime | None:
        assert self._ttl is not None
        connections = self._shared.connections
        connection = connections.take()
        try:
            expiries = [
                connections.run(connection, self._statements.renew, (key, self._owner, self._ttl))[0][0]
                for key in self._keys
            ]
        finally:
            connections.give_back(connection)
        if any(expiry is None for expiry in expiries):
            return None
        self._expires_at = min(expiries)
        return self._expires_at

    def holds(self) -> bool:
        row = self._shared.connections.one(self._statements.holds_all, (self._keys, self._fences))
        return bool(row[0])

    def _release_call(self, session: psycopg.Connection[Any] | None) -> bool:
        connections = self._shared.connections
        connection = connections.take()
        try:
            answers = [
                connections.run(connection, self._statements.release, (key, self._owner))[0][0]
                for key in self._keys
            ]
        finally:
            connections.give_back(connection)
        return all(answers)
