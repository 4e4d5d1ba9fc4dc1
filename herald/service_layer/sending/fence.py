"""Whether this pod may still act on the work it holds: the fence before every FCM request.

Other pods consider this one dead, and take its chunks and finish its cancels without it, once its
heartbeat has expired in the registry (``HERALD_HEARTBEAT_INTERVAL_S`` times ``_MISSES``). A pod that
the kernel froze (SIGSTOP, a stalled VM, a node under memory pressure) or that cannot reach the
registry cannot know that it was declared dead; what it can know is when its last heartbeat
reached the registry. So:

- ``holds(epoch)``, checked before every request and every retry (no I/O: a clock read): the last
  heartbeat that landed started less than the TTL minus one interval ago (so this pod stops
  before anyone could call it dead), and this pod has not been away since ``epoch``;
- a heartbeat that lands after a gap of a whole TTL since the previous one starts a new epoch:
  the pod was away, and work held from before must be re-established (its chunk claim renewed
  with its fencing token, its campaign still sending, read from the store) before anything more
  is sent for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Fence:
    def __init__(self, ttl_s: float, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._usable_s = max(interval_s, ttl_s - interval_s)
        self._clock = clock
        self._confirmed_at = clock()
        self._confirmed = asyncio.Event()
        self.epoch = 0
        """Incremented each time this pod comes back from a gap of a whole TTL."""

    def confirm(self, started_at: float) -> None:
        """A heartbeat started at ``started_at`` (this clock) reached the registry."""
        if started_at - self._confirmed_at >= self._ttl_s:
            self.epoch += 1  # beats lapsed: the others may have taken our work meanwhile
        self._confirmed_at = max(self._confirmed_at, started_at)
        self._confirmed.set()

    def holds(self, epoch: int) -> bool:
        """Work taken in ``epoch`` may go on: no gap since, and the last beat is recent."""
        return epoch == self.epoch and self._clock() - self._confirmed_at < self._usable_s

    @property
    def now_holds(self) -> bool:
        return self._clock() - self._confirmed_at < self._usable_s

    async def confirmed(self, timeout_s: float) -> bool:
        """Wait for a heartbeat that lands from now on; False if none within ``timeout_s``."""
        self._confirmed.clear()
        try:
            await asyncio.wait_for(self._confirmed.wait(), timeout_s)
        except TimeoutError:
            return False
        return self.now_holds
