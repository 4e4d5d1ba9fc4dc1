"""Chunks RabbitMQ gave up on (``herald.chunks.dead``): their unrecorded recipients count as
failed, so the campaign still finishes and its numbers still add up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald import names
from herald.adapters import rabbit
from herald.domain.documents import ChunkStatus
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS_DEAD_LETTERED, CHUNKS_DEFERRED
from herald.service_layer.chunk_lifecycle import ChunkLifecycle, Tally
from services.sender.claims import ChunkClaims, NotTaken

log = logging.getLogger(__name__)

DEAD_LETTERED = "HERALD_DEAD_LETTERED"
"""Error recorded for recipients of a chunk that could not be processed."""

Forward = Callable[[bytes, str], Awaitable[None]]
"""Publish a message body to the dead-letter exchange with a routing key."""


class DeadChunks:
    def __init__(self, lifecycle: ChunkLifecycle, claims: ChunkClaims,
                 is_cancelled: Callable[[str], Awaitable[bool]], forward: Forward) -> None:
        self._lifecycle = lifecycle
        self._claims = claims
        self._is_cancelled = is_cancelled
        self._forward_to = forward

    async def handle(self, message: RabbitMessage) -> None:
        try:
            chunk = SendChunk.model_validate_json(message.body)
        except ValidationError:
            log.error("malformed chunk message moved to %s: %r", names.DEAD_MESSAGES_QUEUE,
                      message.body[:500])
            await self._forward(message.body, names.DEAD_MESSAGES_ROUTING_KEY, message)
            return
        try:
            with self._claims.first_here(chunk.campaign_id, chunk.seq) as first:
                settled = first and await self._settle(chunk)
        except Exception:
            log.exception("dead chunk %s:%d could not be settled; trying again later",
                          chunk.campaign_id, chunk.seq)
            settled = False
        if not settled:
            CHUNKS_DEFERRED.inc()
            await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
            await self._forward(message.body, names.DEAD_CHUNKS_ROUTING_KEY, message)
            return
        await message.ack()

    async def _forward(self, body: bytes, routing_key: str, message: RabbitMessage) -> None:
        """Put a copy on a dead-letter queue and acknowledge this delivery."""
        await self._forward_to(body, routing_key)
        await message.ack()

    async def _settle(self, chunk: SendChunk) -> bool:
        """Record the unsent rest as failed and close the chunk; False if it is still held
        (by another sender, or by a delivery of it in this process)."""
        taken = await self._claims.take(chunk.campaign_id, chunk.seq)
        if taken is NotTaken.CLOSED:
            return True
        if taken is NotTaken.BUSY:
            return False
        recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq)
        tally = Tally.of(recorded)
        rest = [position for position in range(len(chunk.recipients)) if position not in recorded]
        cancelled = await self._is_cancelled(chunk.campaign_id)
        if not cancelled:
            await self._lifecycle.record(chunk.campaign_id, chunk.seq,
                                         [(position, DEAD_LETTERED) for position in rest], tally)
        CHUNKS_DEAD_LETTERED.inc()
        log.error("chunk %s:%d dead-lettered; %d recipients recorded as failed",
                  chunk.campaign_id, chunk.seq, 0 if cancelled else len(rest))
        status = ChunkStatus.CANCELLED if cancelled else ChunkStatus.DEAD
        await self._lifecycle.close(chunk.campaign_id, chunk.seq, status, tally)
        return True
