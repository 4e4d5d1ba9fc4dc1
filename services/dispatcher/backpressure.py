"""Backpressure: a dispatcher publishes a chunk only while ``herald.chunks`` has room for it.

The chunks of every running campaign share one queue; a dispatcher that paged as fast as it can
would put a whole campaign there (a million devices is about 160 MB). Before each publish it reads
the queue's ready depth from RabbitMQ (the answer to a queue declare, current to the message) and
waits while ``HERALD_DISPATCH_MAX_QUEUED_CHUNKS`` chunks are ready, until senders take some.

One dispatcher checks and publishes one chunk at a time (a lock across its campaigns), and a
publish returns only once the broker confirmed it, so a dispatcher alone never goes over the
bound. Several dispatchers that find the last free place at the same moment can each publish
into it: at most one chunk per dispatcher over the bound.

While it waits, ``keep_going`` runs every poll: the paging it holds up stops there if the
campaign is cancelled, the pod is stopping, or its lease was lost (and renews the lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from herald.observability import DISPATCH_PAUSED_SECONDS

POLL_S = 0.05
"""How often a paused dispatcher looks at the queue again (a declare: one broker round trip)."""


class Backpressure:
    def __init__(self, chunks_ready: Callable[[], Awaitable[int]], max_queued: int,
                 poll_s: float = POLL_S) -> None:
        self._chunks_ready = chunks_ready
        self._max_queued = max_queued
        self._poll_s = poll_s
        self._publishing = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def room(self, keep_going: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """Wait until the queue has room, then hold it for one publish."""
        async with self._publishing:
            started = time.monotonic()
            try:
                while await self._chunks_ready() >= self._max_queued:
                    await keep_going()
                    await asyncio.sleep(self._poll_s)
            finally:
                DISPATCH_PAUSED_SECONDS.inc(time.monotonic() - started)
            yield


def unbounded() -> Backpressure:
    """No bound (tests of paging itself)."""
    async def empty() -> int:
        return 0
    return Backpressure(empty, 1)
