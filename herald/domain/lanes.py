"""Lanes: which campaigns go first when several send at once (docs/design.md, "Lanes").

Every campaign is in one lane. ``urgent`` (an outage notice, a security alert) goes before
everything; ``standard`` is the default; ``bulk`` takes what the others leave, and never the
share of the project's FCM rate kept for urgent sends (``HERALD_URGENT_RESERVE_SHARE``).

A lane decides three things, each in one place: which queue a campaign's chunks wait in
(``chunk_route``), which requests a sender starts first when its window is full
(``sending/window.py``), and which rate buckets a request takes tokens from
(``adapters/rate_limit.py``). Within a lane, campaigns share the fleet fairly: each may have only
a bounded number of chunks on offer at once (``offer_window``), so one with millions of devices
never stands in front of one with hundreds.
"""

from __future__ import annotations

import math
from enum import StrEnum


class Lane(StrEnum):
    URGENT = "urgent"
    STANDARD = "standard"
    BULK = "bulk"

    @property
    def rank(self) -> int:
        """0 goes first: the order of claims, queues and requests."""
        return _RANKS[self]


_RANKS = {Lane.URGENT: 0, Lane.STANDARD: 1, Lane.BULK: 2}

LANES_FIRST_TO_LAST = tuple(sorted(Lane, key=lambda lane: lane.rank))


class Route(StrEnum):
    """The queue a chunk waits in: one per lane, and ``paced`` for capped campaigns."""

    URGENT = "urgent"
    STANDARD = "standard"
    BULK = "bulk"
    PACED = "paced"


def chunk_route(lane: Lane, rate_per_s: int | None) -> Route:
    """Where a campaign's chunks wait for a sender.

    A capped campaign's chunk is held by a sender for as long as its rate makes it last
    (500 recipients at 10/s: 50 s), waiting for tokens most of that time; in its lane's queue it
    would take one of the few places every other campaign of the lane needs. Capped chunks of
    the standard and bulk lanes therefore wait apart (``paced``), consumed with a prefetch of
    their own that is large enough for many of them to wait at once. An urgent campaign keeps
    its lane's queue whatever its cap: nothing stands in front of it there.
    """
    if lane is Lane.URGENT:
        return Route.URGENT
    if rate_per_s is not None:
        return Route.PACED
    return Route(lane.value)


PACED_HORIZON_S = 10.0
"""A capped campaign keeps this much of its sending on offer (its chunks published, not closed)."""


def offer_window(rate_per_s: int | None, chunk_size: int, uncapped: int) -> int:
    """How many of a campaign's chunks may be on offer at once (published and not closed).

    An uncapped campaign gets ``uncapped`` (enough to keep the fleet busy alone, few enough that
    another campaign's chunk never waits behind many of its own); a capped one what its rate
    sends in ``PACED_HORIZON_S``, at least one chunk."""
    if rate_per_s is None:
        return uncapped
    return max(1, min(uncapped, math.ceil(rate_per_s * PACED_HORIZON_S / chunk_size)))
