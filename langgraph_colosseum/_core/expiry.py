"""Reads the Redis head serves push a thread's retention expiry back too.

A read from Postgres pushes the expiry back in its own statement
(`sql.TOUCH_THREAD`, which writes only when less than 0.9 of `thread_ttl` is
left). A read the Redis head serves makes no Postgres round trip, so the sweep
(which reads only Postgres) would delete a thread that is being read. Such a
hit therefore sends the same touch itself, but only when this process has not
pushed that thread's expiry back for `HIT_TOUCH_EVERY` of `thread_ttl`; the
other hits stay Redis-only.

The bound that follows (the README states it): after a touch started at t0,
the expiry is at least t0 + 0.9 * ttl, and a hit skips its touch only before
t0 + 0.1 * ttl. So a thread read at time t, from Redis or Postgres, expires no
earlier than t + 0.8 * ttl, and no later than t + ttl if nothing reads or
writes it again. The sweep re-checks the expiry under the row lock, so a touch
that committed before the lock keeps the thread; a hit's touch waiting behind
the lock is a read racing the sweep, served the head the sweep then drops.

A touch is recorded only once its statement returned, with the time taken
before it was sent (an earlier time: the bound errs towards touching again).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# Of thread_ttl: how long a touch made by this process covers its later hits.
HIT_TOUCH_EVERY = 0.1


class ReadTouches:
    """When this process last pushed each thread's expiry back (monotonic seconds).

    Only the touches of the last `HIT_TOUCH_EVERY * ttl` are kept: older ones
    cover nothing, and are dropped as new ones are recorded (oldest first,
    since they are recorded in time order).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._at: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def due(self, thread_id: str, ttl_seconds: float) -> bool:
        """Whether a hit on `thread_id` must push its expiry back in Postgres."""
        at = self._at.get(thread_id)
        return at is None or self.clock() - at >= HIT_TOUCH_EVERY * ttl_seconds

    def record(self, thread_id: str, started: float, ttl_seconds: float) -> None:
        horizon = self.clock() - HIT_TOUCH_EVERY * ttl_seconds
        with self._lock:
            self._at.pop(thread_id, None)
            self._at[thread_id] = started
            while self._at:
                oldest, at = next(iter(self._at.items()))
                if at > horizon:
                    break
                del self._at[oldest]
