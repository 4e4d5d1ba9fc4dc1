"""The window's permits, handed out by lane: a freed permit goes to the most urgent waiter.

``asyncio.Semaphore`` wakes its waiters first come, first served: with four bulk chunks admitting
their targets, an urgent chunk that arrives would get one permit in five. Here each waiter names
its lane's rank, and a permit given back goes to the oldest waiter of the lowest rank (urgent,
then standard, then bulk); within a lane it is first come, first served, so the chunks of one lane
take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from herald.domain.lanes import Lane


class LanePermits:
    def __init__(self, permits: int) -> None:
        self._free = permits
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = tuple(
            deque() for _ in Lane)

    @property
    def free(self) -> int:
        return self._free

    async def acquire(self, rank: int = Lane.STANDARD.rank) -> None:
        """Wait for a permit; waiters of a lower ``rank`` are served first."""
        if self._free > 0:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[rank].append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed over just as the waiter went away: pass it on
            else:
                with contextlib.suppress(ValueError):  # a release may have dropped it already
                    self._waiting[rank].remove(granted)
            raise

    def release(self) -> None:
        """Give a permit back: to the first waiter of the lowest rank, else to the pool."""
        for waiting in self._waiting:
            while waiting:
                granted = waiting.popleft()
                if not granted.done():
                    granted.set_result(None)
                    return
        self._free += 1
