"""The rate limiter: GCRA (a token bucket without a drip task) per identity.

``limit`` calls per ``window_s``: a full burst of ``limit`` calls, then one every
``window_s / limit`` seconds; no window edges, so no double burst at a boundary (RATE-02).
It runs on the monotonic clock, so stepping the wall clock neither locks anyone out nor
hands out a fresh burst (RATE-04). Rejected calls do not push the wait further out.
Memory stays bounded: an identity whose bucket is full again is the same as an unknown
one, so such entries are dropped when the table grows (RATE-03).
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_KEYS = 100_000


class RateLimiter:
    def __init__(self, limit: int, window_s: float, *, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.interval = window_s / limit  # one call's worth of time
        self.tolerance = window_s  # a burst of `limit` calls fits in it
        self._clock = clock
        self._tat: dict[str, float] = {}  # theoretical arrival time per identity

    def take(self, identity: str) -> float:
        """0.0 when the call may go ahead (and is counted); else seconds until one may."""
        now = self._clock()
        tat = max(self._tat.get(identity, now), now)
        after = tat + self.interval
        wait = after - now - self.tolerance
        if wait > 1e-9:
            return wait
        self._tat[identity] = after
        if len(self._tat) > MAX_KEYS:
            self._evict(now)
        return 0.0

    def _evict(self, now: float) -> None:
        self._tat = {k: t for k, t in self._tat.items() if t > now}
