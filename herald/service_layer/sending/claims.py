"""Holding a chunk while sending it: one sender at a time, and one delivery of it per sender.

Two copies of one chunk message can exist (a dispatcher that died between publishing and
checkpointing republishes it; a chunk handed back is published again). Whichever copy finds the
chunk held by a live sender waits; a chunk whose holder died is taken over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from enum import Enum

from herald.clock import utcnow
from herald.domain.documents import ChunkState, ChunkStatus
from herald.domain.messages import SendChunk
from herald.service_layer.ports import ChunkRepository, PodRegistry


class NotTaken(Enum):
    UNKNOWN = "unknown"  # no such chunk: a forged or misrouted message
    CLOSED = "closed"  # sent (or closed) already: nothing to do
    BUSY = "busy"  # another live holder, or another delivery in this process, is on it


class ChunkClaims:
    def __init__(self, chunks: ChunkRepository, registry: PodRegistry, pod_id: str,
                 hold_s: float, clock: Callable[[], datetime] = utcnow) -> None:
        self._chunks = chunks
        self._registry = registry
        self._pod_id = pod_id
        self._hold = timedelta(seconds=hold_s)
        self._clock = clock
        self._in_hand: set[str] = set()

    @contextlib.contextmanager
    def first_here(self, campaign_id: str, seq: int) -> Iterator[bool]:
        """Whether this delivery is the only one of its chunk being handled in this process."""
        key = f"{campaign_id}:{seq}"
        if key in self._in_hand:
            yield False
            return
        self._in_hand.add(key)
        try:
            yield True
        finally:
            self._in_hand.discard(key)

    async def take(self, campaign_id: str, seq: int) -> ChunkState | NotTaken:
        """Hold the chunk for this pod: its state before (counting one more attempt; this
        claim's fencing token is ``fence + 1``), or why not. A chunk held by a pod whose
        heartbeat expired is taken over, conditionally on the token read here."""
        now = self._clock()
        state = await self._chunks.state(campaign_id, seq)
        if state is None:
            return NotTaken.UNKNOWN
        if state.status is not ChunkStatus.PENDING:
            return NotTaken.CLOSED
        holder = state.owner
        if (holder is not None and holder != self._pod_id and state.owner_until is not None
                and state.owner_until > now and await self._registry.is_alive(holder)):
            return NotTaken.BUSY
        before = await self._chunks.claim(campaign_id, seq, self._pod_id, holder,
                                          now + self._hold, fence=state.fence if holder else 0)
        return NotTaken.BUSY if before is None else before

    async def as_stored(self, chunk: SendChunk) -> SendChunk:
        """The chunk message with its recipients as the store holds them now: a person erased
        since it was published is a placeholder there, while the message still carries them
        (``herald/service_layer/erasure.py``)."""
        stored = await self._chunks.get(chunk.campaign_id, chunk.seq)
        if stored is None:
            return chunk
        return chunk.model_copy(update={"recipients": list(stored.recipients)})

    async def renew(self, campaign_id: str, seq: int, token: int) -> int | None:
        """Still hold a chunk claimed (or last renewed) with fencing ``token``: the new token,
        or None if another pod took it over (or it closed) meanwhile."""
        return await self._chunks.renew(campaign_id, seq, self._pod_id, token,
                                        self._clock() + self._hold)

    async def wait_for_next_wave(self, campaign_id: str, seq: int, wave: int) -> bool:
        """Give back a chunk whose recipients of a staged rollout's waves up to ``wave`` all
        have an outcome and whose later waves' do not: pending, ``wave_sent``, its attempts
        counted afresh for the delivery its next wave offers."""
        return await self._chunks.wait_for_next_wave(campaign_id, seq, self._pod_id, wave)

    async def release(self, campaign_id: str, seq: int, *, refund: bool) -> None:
        """Give the chunk back, as far as MongoDB lets us (a hold also expires by itself)."""
        with contextlib.suppress(Exception):
            await self._chunks.release(campaign_id, seq, self._pod_id, refund=refund)
