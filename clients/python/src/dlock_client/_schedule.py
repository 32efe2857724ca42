"""When a TTL lease's watchdog acts, as the Rust client's ``lock/watchdog.rs``: it renews every
``renew_every`` (a third of the ttl unless chosen, so that two renewals can fail before the
lease runs out), and declares the lease lost when its local deadline passes first.

The local deadline (``time.monotonic()``) is never later than the server's expiry: a grant or
renewal answered to a statement sent at ``sent`` happened after ``sent``, so ``sent + ttl``
(plus the server's own time to grant, which it reports) is no later than what the server set.
Clocks of client and server are never compared.
"""

from __future__ import annotations

import enum

#: Shortest pause before retrying a renewal that failed on a connection error, in seconds.
MIN_RETRY = 0.010


class Due(enum.Enum):
    """What the watchdog does when it wakes."""

    SLEEP = "sleep"
    RENEW = "renew"
    LOST = "lost"


def renewal_interval(ttl: float, chosen: float | None) -> float:
    """How often a watchdog renews a lease of ``ttl``: as chosen, else a third of the ttl."""
    return chosen if chosen is not None else ttl / 3


class Schedule:
    """The deadline and the renewals of one TTL lease (times are ``time.monotonic()``)."""

    def __init__(self, ttl: float, deadline: float, renew_every: float | None, now: float) -> None:
        self.ttl = ttl
        self.deadline = deadline
        self.renew_every = renew_every
        self.next_renewal = None if renew_every is None else now + renew_every
        self.renewing = False

    def next_wake(self) -> float:
        """When to look again: the next renewal, or the deadline if sooner (or if a renewal is
        already on its way, whose answer is useless after the deadline)."""
        if self.next_renewal is None or self.renewing:
            return self.deadline
        return min(self.next_renewal, self.deadline)

    def due(self, now: float) -> Due:
        """What to do at ``now``; a renewal it asks for counts as started."""
        if now >= self.deadline:
            return Due.LOST
        if self.next_renewal is not None and not self.renewing and now >= self.next_renewal:
            self.renewing = True
            return Due.RENEW
        return Due.SLEEP

    def extended(self, sent: float) -> None:
        """A renewal sent at ``sent`` was answered with a new expiry (the watchdog's or one
        made by hand)."""
        self.deadline = max(self.deadline, sent + self.ttl)

    def renewed(self, sent: float, now: float) -> None:
        """The watchdog's renewal, sent at ``sent``, succeeded at ``now``."""
        self.extended(sent)
        self.renewing = False
        if self.renew_every is not None:
            self.next_renewal = now + self.renew_every

    def retry_soon(self, now: float) -> None:
        """The watchdog's renewal failed on a connection error: the connection may come back
        before the deadline, so retry sooner than usual."""
        self.renewing = False
        if self.renew_every is not None:
            self.next_renewal = now + max(self.renew_every / 4, MIN_RETRY)
