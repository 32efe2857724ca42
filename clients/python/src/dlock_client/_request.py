"""What a single-key acquire asks for -- an exclusive lease, a shared one (or a semaphore's
permit), or an election's lead -- and the statement and parameters that take it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._sql import Statements

Kind = Literal["exclusive", "shared", "leader"]


@dataclass(frozen=True)
class Request:
    """One acquire, its arguments already checked."""

    key: str
    owner: str
    kind: Kind
    #: Seconds; ``None``: session-bound.
    ttl: float | None
    #: A semaphore's size (shared leases only; ``None``: no limit).
    permits: int | None = None
    #: What an election's leader publishes.
    info: str | None = None
    lock_delay: float = 0.0

    def waiting(self, s: Statements, wait: float | None) -> tuple[str, tuple[Any, ...]]:
        """The statement that waits up to ``wait`` seconds on the server (``None``: no limit)."""
        key, owner, ttl = self.key, self.owner, self.ttl
        if self.kind == "shared":
            return s.acquire_shared, (key, owner, ttl, wait, self.permits, self.lock_delay)
        if self.kind == "leader":
            return s.campaign, (key, owner, ttl, self.info, wait, self.lock_delay)
        if self.lock_delay:
            return s.acquire_delayed, (key, owner, ttl, wait, self.lock_delay)
        # Exclusive leases without a lock-delay keep version 1's call, which every server has.
        return s.acquire, (key, owner, ttl, wait)

    def trying(self, s: Statements, settle: float | None) -> tuple[str, tuple[Any, ...]]:
        """One try that never queues, then when to try again. Only the exclusive try waits up to
        ``settle`` (``None``: no limit) for a transaction that is changing the key."""
        key, owner, ttl = self.key, self.owner, self.ttl
        if self.kind == "shared":
            return s.try_shared, (key, owner, ttl, self.permits, self.lock_delay)
        if self.kind == "leader":
            return s.try_campaign, (key, owner, ttl, self.info, self.lock_delay)
        if self.lock_delay:
            return s.try_delayed, (key, owner, ttl, self.lock_delay)
        return s.try_acquire, (key, owner, ttl, settle)
