"""Argument checks made before anything is sent, with the limits of the contract
(``core/src/limits.rs`` and ``core/src/args.rs``): a call must not wait behind the client's
line for a key only to be refused. Wrong types raise :class:`TypeError`; wrong values raise
:class:`~dlock_client.errors.InvalidArgument` (a :class:`ValueError`) carrying the SQLSTATE the
server would answer. ``dlock.max_ttl`` is the server's alone to check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Union

from .errors import InvalidArgument

#: Longest key, in bytes (UTF-8), not characters.
MAX_KEY_BYTES = 1024
#: Longest owner string, in bytes.
MAX_OWNER_BYTES = 256
#: Most keys of one multi-key lock.
MAX_KEYS_PER_CALL = 64
#: Longest election ``info``, in bytes.
MAX_INFO_BYTES = 1024
#: Largest ``max_holders`` the server takes (an ``int4``).
MAX_PERMITS = 2**31 - 1
#: Longer durations are taken as this (about 285,000 years): PostgreSQL's intervals end not far
#: beyond, and nothing real waits or lives that long (as the Rust client's ``MAX_DURATION``).
MAX_SECONDS = 9_000_000_000_000.0

#: A duration: seconds (``int`` or ``float``) or a :class:`~datetime.timedelta`.
Seconds = Union[float, int, timedelta]


def _refuse(message: str, sqlstate: str = "22023") -> InvalidArgument:
    return InvalidArgument(
        f"dlock: {message}", sqlstate=sqlstate, detail="checked by the client before sending"
    )


def text(what: str, value: object, max_bytes: int) -> str:
    """A key, owner or election name: a non-empty ``str`` of at most ``max_bytes`` UTF-8 bytes."""
    if not isinstance(value, str):
        raise TypeError(f"dlock: {what} must be a str, not {type(value).__name__}")
    if not value:
        raise _refuse(f"{what} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise _refuse(f"{what} is not valid UTF-8 ({e.reason})", "22021") from None
    if size > max_bytes:
        raise _refuse(f"{what} is {size} bytes long, the limit is {max_bytes} bytes")
    if "\x00" in value:
        # PostgreSQL's text has no NUL: the server would refuse it with 22021.
        raise _refuse(f"{what} must not contain NUL characters", "22021")
    return value


def key(value: object) -> str:
    """A checked lease key."""
    return text("key", value, MAX_KEY_BYTES)


def owner(value: object) -> str:
    """A checked owner string."""
    return text("owner", value, MAX_OWNER_BYTES)


def _number(what: str, value: object) -> float:
    """Seconds as a float, from a number or a timedelta (any sign, not NaN)."""
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise TypeError(
            f"dlock: {what} must be seconds (int or float) or a timedelta, not {type(value).__name__}"
        )
    if math.isnan(number):
        raise _refuse(f"{what} must be a number of seconds, not NaN")
    return min(number, MAX_SECONDS)


def seconds(what: str, value: object) -> float:
    """A duration that may be zero: a wait, a lock-delay."""
    number = _number(what, value)
    if number < 0:
        raise _refuse(f"{what} must not be negative")
    return number


def positive(what: str, value: object) -> float:
    """A duration that must be more than zero (at least a microsecond, the server's unit)."""
    number = _number(what, value)
    if number < 1e-6:
        raise _refuse(f"{what} must be positive")
    return number


def ttl(value: object) -> float | None:
    """A ttl: ``None`` (a session-bound lease) or positive."""
    return None if value is None else positive("ttl", value)


def wait(value: object) -> float | None:
    """A wait: ``None`` (without limit) or zero (one try) and up."""
    return None if value is None else seconds("wait", value)


def permits(value: object) -> int:
    """A semaphore's size: an ``int`` from 1 to 2**31 - 1."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"dlock: permits must be an int, not {type(value).__name__}")
    if value < 1:
        raise _refuse(f"a semaphore needs at least 1 permit (max_holders >= 1), not {value}")
    if value > MAX_PERMITS:
        raise _refuse(f"permits is {value}, the limit is {MAX_PERMITS}")
    return value


def keys(value: object) -> list[str]:
    """The keys of a multi-key lock: 1 to 64 valid keys, none twice."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"dlock: keys must be an iterable of str, not {type(value).__name__}")
    checked = [key(k) for k in value]
    if not checked:
        raise _refuse("keys must not be empty")
    if len(checked) > MAX_KEYS_PER_CALL:
        raise _refuse(f"keys has {len(checked)} elements, the limit is {MAX_KEYS_PER_CALL}")
    seen: set[str] = set()
    for k in checked:
        if k in seen:
            raise _refuse(f"keys lists {k!r} twice")
        seen.add(k)
    return checked


def info(value: object) -> str | None:
    """An election's ``info``: ``None`` or a ``str`` of at most 1024 bytes."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"dlock: info must be a str, not {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_INFO_BYTES:
        raise _refuse(f"info is {size} bytes long, the limit is {MAX_INFO_BYTES} bytes")
    return value
