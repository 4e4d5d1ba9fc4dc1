"""A chunk RabbitMQ gave up on (``herald.chunks.dead``): its unrecorded recipients count as
failed (``HERALD_DEAD_LETTERED``), so the campaign still finishes and its numbers still add up.
A chunk of a cancelled campaign closes cancelled instead: its rest stays unsent."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from herald.domain.documents import ChunkStatus
from herald.domain.messages import SendChunk
from herald.domain.outcomes import outcome_at
from herald.observability import CHUNKS_DEAD_LETTERED
from herald.service_layer.sending.claims import ChunkClaims, NotTaken
from herald.service_layer.sending.lifecycle import ChunkLifecycle, Tally

log = logging.getLogger(__name__)

DEAD_LETTERED = "HERALD_DEAD_LETTERED"
"""Error recorded for recipients of a chunk that could not be processed."""


class DeadChunks:
    def __init__(self, lifecycle: ChunkLifecycle, claims: ChunkClaims,
                 is_cancelled: Callable[[str], Awaitable[bool]]) -> None:
        self._lifecycle = lifecycle
        self._claims = claims
        self._is_cancelled = is_cancelled

    async def settle(self, chunk: SendChunk) -> bool:
        """Record the unsent rest as failed and close the chunk; False if it is still held
        (by another sender, or by a delivery of it in this process)."""
        with self._claims.first_here(chunk.campaign_id, chunk.seq) as first:
            if not first:
                return False
            taken = await self._claims.take(chunk.campaign_id, chunk.seq)
            if taken is NotTaken.CLOSED:
                return True
            if taken is NotTaken.BUSY:
                return False
            await self._close(chunk)
            return True

    async def _close(self, chunk: SendChunk) -> None:
        recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq)
        tally = Tally.of(recorded)
        rest = [position for position in range(len(chunk.recipients)) if position not in recorded]
        cancelled = await self._is_cancelled(chunk.campaign_id)
        if not cancelled:
            await self._lifecycle.record(chunk.campaign_id, chunk.seq,
                                         [outcome_at(p, DEAD_LETTERED) for p in rest], tally)
        CHUNKS_DEAD_LETTERED.inc()
        log.error("chunk %s:%d dead-lettered; %d recipients recorded as failed",
                  chunk.campaign_id, chunk.seq, 0 if cancelled else len(rest))
        status = ChunkStatus.CANCELLED if cancelled else ChunkStatus.DEAD
        await self._lifecycle.close(chunk.campaign_id, chunk.seq, status, tally)
