"""Growing pauses between the tries of a wait that cannot be woken by a notification (behind a
transaction pooler), as the Rust client's ``waiting/polling.rs``: from 10 ms, doubling up to the
client's maximum, each with a random half so that the waiters of many clients spread out, and
never past the blocking lease's expiry, which the server tells."""

from __future__ import annotations

import random

#: The first pause after a busy answer, in seconds.
FIRST_PAUSE = 0.010
#: The longest pause unless the client says otherwise: how late a waiter may notice a release,
#: against how many tries per second a waiting key costs the server.
DEFAULT_MAX_POLL_INTERVAL = 0.250


class Backoff:
    """The pauses of one wait."""

    def __init__(self, max_interval: float) -> None:
        self._step = FIRST_PAUSE
        self._max = max(max_interval, FIRST_PAUSE)

    def pause(self, retry_after: float | None, rand: float | None = None) -> float:
        """The next pause: between half the current step and all of it (``rand`` in [0, 1)
        picks where), and no later than ``retry_after`` -- though never below the first pause,
        so that a key a transaction keeps busy (``retry_after`` 0) is not hammered."""
        step = self._step
        self._step = min(step * 2, self._max)
        r = random.random() if rand is None else min(max(rand, 0.0), 1.0)
        pause = step / 2 + step / 2 * r
        if retry_after is not None:
            pause = min(pause, max(retry_after, FIRST_PAUSE))
        return pause
