"""Backpressure: a dispatcher publishes a chunk only while its queue has room for it.

The chunks of every running campaign wait in four queues (``herald/domain/lanes.py``: one per lane
and ``paced`` for capped campaigns); a dispatcher that paged as fast as it can would put a whole
campaign there (a million devices is about 160 MB). Each queue has its share of
``HERALD_DISPATCH_MAX_QUEUED_CHUNKS`` (64): a quarter for ``urgent``, three eighths for
``standard``, three sixteenths each for ``bulk`` and ``paced``; the shares add up to the bound, so
the memory bound holds in total, and a queue that does not drain (capped campaigns waiting for
their rate) never stops the paging of another. Before each publish the dispatcher reads its
queue's ready depth from RabbitMQ (the answer to a queue declare, current to the message) and
waits while the queue's share is full, until senders take some.

One dispatcher checks and publishes one chunk per queue at a time (a lock per queue across its
campaigns: campaigns waiting for the same queue take turns), and a publish returns only once the
broker confirmed it, so a dispatcher alone never goes over a share. Several dispatchers that find
the last free place at the same moment can each publish into it: at most one chunk per
dispatcher over a share.

While it waits, ``keep_going`` runs every poll: the paging it holds up stops there if the
campaign is cancelled or paused, the pod is stopping, or its lease was lost (and renews the
lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from herald.domain.lanes import Route
from herald.observability import DISPATCH_PAUSED_SECONDS

POLL_S = 0.05
"""How often a paused dispatcher looks at the queue again (a declare: one broker round trip)."""

SHARES = {Route.URGENT: 4 / 16, Route.STANDARD: 6 / 16, Route.BULK: 3 / 16, Route.PACED: 3 / 16}
"""Each queue's share of the bound on ready chunks (they add up to 1)."""


def shares_of(max_queued: int) -> dict[Route, int]:
    """Ready chunks each queue may hold: at least one each, adding up to ``max_queued`` (or to
    one per queue when the bound is smaller than the number of queues)."""
    shares = {route: max(1, int(max_queued * share)) for route, share in SHARES.items()}
    shares[Route.STANDARD] += max(0, max_queued - sum(shares.values()))
    return shares


class Backpressure:
    def __init__(self, chunks_ready: Callable[[Route], Awaitable[int]], max_queued: int,
                 poll_s: float = POLL_S) -> None:
        self._chunks_ready = chunks_ready
        self._shares = shares_of(max_queued)
        self._poll_s = poll_s
        self._publishing = {route: asyncio.Lock() for route in Route}

    @contextlib.asynccontextmanager
    async def room(self, route: Route,
                   keep_going: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """Wait until ``route``'s queue has room, then hold it for one publish."""
        async with self._publishing[route]:
            started = time.monotonic()
            try:
                while await self._chunks_ready(route) >= self._shares[route]:
                    await keep_going()
                    await asyncio.sleep(self._poll_s)
            finally:
                DISPATCH_PAUSED_SECONDS.inc(time.monotonic() - started)
            yield


def unbounded() -> Backpressure:
    """No bound (tests of paging itself)."""
    async def empty(_route: Route) -> int:
        return 0
    return Backpressure(empty, 64)
