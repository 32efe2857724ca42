"""The lease of the innermost ``@client.locked`` call running in this context (thread or task)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

_current: ContextVar[Any] = ContextVar("dlock_client_current_lease", default=None)


def current_lease() -> Any:
    """The lease held for the innermost function decorated with ``@client.locked`` that is
    running in this thread or task (its ``fence`` for fenced writes, its ``lost`` event to
    stop early), or ``None`` outside one."""
    return _current.get()


def formatted_key(template: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The key of one call of a ``@client.locked`` function: its template formatted with the
    call's arguments (``"report:{0}"``, ``"user:{user_id}"``)."""
    return template.format(*args, **kwargs)
