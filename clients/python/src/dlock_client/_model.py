"""Plain records of what the server answers: grants, leaders, live leases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence


@dataclass(frozen=True)
class Grant:
    """An acquire's answer: the fence, the server's clock just after the grant, and when the
    server started the statement (so that the time the server took is known)."""

    fence: int
    server_now: datetime
    statement_start: datetime

    @property
    def server_elapsed(self) -> float:
        """Seconds from the server receiving the statement to the grant (waits included)."""
        return max((self.server_now - self.statement_start).total_seconds(), 0.0)


@dataclass(frozen=True)
class Busy:
    """A try that found the key held: the seconds until the blocking lease expires by itself
    (``None``: only a release, or its holder's session ending, frees it)."""

    retry_after: float | None


def grant(row: Sequence[Any]) -> Grant | None:
    """An acquire's row: ``(fence or NULL, server clock, statement start, ...)``."""
    fence = row[0]
    if fence is None:
        return None
    return Grant(int(fence), row[1], row[2])


def acquired(row: Sequence[Any]) -> Grant | Busy:
    """An acquire's row, which says nothing about when to try again."""
    granted = grant(row)
    return Busy(None) if granted is None else granted


def tried(row: Sequence[Any]) -> Grant | Busy:
    """A try's row: a grant, or when to try again (its fourth column)."""
    granted = grant(row)
    if granted is not None:
        return granted
    retry_after = row[3] if len(row) > 3 else None
    # Negative would be the server's rounding: retry at once.
    return Busy(None if retry_after is None else max(float(retry_after), 0.0))


@dataclass(frozen=True)
class Leader:
    """The current leader of an election, as ``dlock_leader`` shows it (never the candidate)."""

    #: What the leader published about itself when it campaigned (``None`` if nothing).
    info: str | None
    #: The leader's term: the fence of its lease, greater than every earlier leader's.
    term: int
    #: When it became leader (server clock).
    since: datetime
    #: When its lead ends unless renewed (server clock); ``None`` if bound to its session.
    expires_at: datetime | None


@dataclass(frozen=True)
class LiveLease:
    """A live lease as ``dlock_locks`` shows it."""

    key: str
    #: The owner, if the lease is the caller's role's (or the caller is a ``dlock_admin``
    #: member or superuser); ``None`` otherwise.
    owner: str | None
    fence: int
    hold_count: int
    #: When the lease ends unless renewed (server clock); ``None`` if session-bound.
    expires_at: datetime | None
    holder_role: str | None
    #: How many sessions wait on the key on the server.
    waiters: int
    #: ``"exclusive"`` or ``"shared"``.
    mode: str
