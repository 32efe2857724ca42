"""The exceptions of the client, and the one place where SQLSTATEs are mapped to them.

Every exception is a :class:`DlockError`. Those that come from the server keep its SQLSTATE
(``.sqlstate``), its message, detail and hint, and the driver's exception as ``__cause__``.
"""

from __future__ import annotations

import psycopg


class DlockError(Exception):
    """Anything that went wrong taking, keeping or giving back a lock."""

    #: The five-character SQLSTATE of a server error (or of the server error a client-side
    #: check stands for); ``None`` for conditions that are not server errors.
    sqlstate: str | None = None

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class NotAcquired(DlockError):
    """Another owner holds the key: at once (no wait was asked for) or until the wait ran out."""

    def __init__(self, key: str, *, waited: bool) -> None:
        if waited:
            super().__init__(f"not acquired: the wait ran out before {key!r} was free")
        else:
            super().__init__(f"not acquired: another owner holds {key!r}")
        self.key = key
        #: Whether a wait was asked for (and elapsed), as opposed to a single try.
        self.waited = waited


class LeaseLost(DlockError):
    """The lease was lost (expired, force-released, or could not be renewed) while it was in use."""


class InvalidArgument(DlockError, ValueError):
    """An argument was refused (SQLSTATE 22023, or 22004 for a missing one): by the server, or
    by the client before sending anything, with the limits the server applies."""

    sqlstate = "22023"


class ModeConflict(DlockError):
    """The owner holds the key in the other mode (SQLSTATE 0A000): no silent upgrade or downgrade."""

    sqlstate = "0A000"


class PermissionDenied(DlockError):
    """The role may not do this (SQLSTATE 42501): another role's lease, or a force release by a
    role that is not a ``dlock_admin`` member."""

    sqlstate = "42501"


class HeldHere(DlockError):
    """A wait for a key to be free on a key that the waiting server session holds itself (55006)."""

    sqlstate = "55006"


class Cancelled(DlockError):
    """The statement was cancelled or ran into ``statement_timeout`` (SQLSTATE 57014)."""

    sqlstate = "57014"


class Deadlock(DlockError):
    """PostgreSQL's deadlock detector chose this waiter (SQLSTATE 40P01)."""

    sqlstate = "40P01"


class ServerError(DlockError):
    """Any other error the server raised; ``.sqlstate`` says which."""


class ConnectionFailed(DlockError):
    """No usable connection: connecting, the pool, or a connection that broke mid-call.
    Retrying later may work."""


class NotInstalled(DlockError):
    """The dlock extension is not installed in the database the client connects to."""


class Unsupported(DlockError):
    """The client cannot do this in its mode (e.g. a session-bound lease through a transaction
    pooler, where the lease's session would be whichever server connection the pooler lent)."""


_BY_SQLSTATE: dict[str, type[DlockError]] = {
    "22023": InvalidArgument,
    "22004": InvalidArgument,
    "0A000": ModeConflict,
    "42501": PermissionDenied,
    "55006": HeldHere,
    "57014": Cancelled,
    "40P01": Deadlock,
}


def _is_connection_class(sqlstate: str) -> bool:
    # Class 08 (connection exception), 28 (authorization), 57P (shutdown, terminated backend):
    # the session is gone or never was; a new one may work.
    return sqlstate.startswith(("08", "28", "57P"))


def from_driver(error: BaseException) -> DlockError:
    """The :class:`DlockError` for an exception of psycopg or psycopg_pool."""
    if isinstance(error, DlockError):
        return error
    sqlstate = getattr(error, "sqlstate", None)
    if not isinstance(error, psycopg.Error) or sqlstate is None:
        # No SQLSTATE: I/O, a closed connection, a pool that timed out.
        return ConnectionFailed(f"connection: {error}")
    diag = error.diag
    message = diag.message_primary or str(error)
    fields = {"sqlstate": sqlstate, "detail": diag.message_detail, "hint": diag.message_hint}
    kind = _BY_SQLSTATE.get(sqlstate)
    if kind is not None:
        return kind(message, **fields)
    if _is_connection_class(sqlstate):
        return ConnectionFailed(f"connection: {message}", **fields)
    return ServerError(message, **fields)


def is_transient(error: DlockError) -> bool:
    """Whether the same call may succeed later: connection trouble, not a refusal."""
    return isinstance(error, ConnectionFailed)
