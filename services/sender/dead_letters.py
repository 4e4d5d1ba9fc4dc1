"""Chunks RabbitMQ gave up on (``herald.chunks.dead``): their unrecorded recipients count as
failed, so the campaign still finishes and its numbers still add up."""

from __future__ import annotations

import asyncio
import logging

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald import names
from herald.adapters import rabbit
from herald.adapters.chunks import ChunkStatus
from herald.clock import utcnow
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS, CHUNKS_DEAD_LETTERED, CHUNKS_DEFERRED
from herald.runtime import Pod
from herald.service_layer.completion import chunk_finished
from services.sender.chunks import count_outcomes
from services.sender.claims import ChunkClaims, NotTaken

log = logging.getLogger(__name__)

DEAD_LETTERED = "HERALD_DEAD_LETTERED"
"""Error recorded for recipients of a chunk that could not be processed."""


class DeadChunks:
    def __init__(self, pod: Pod, claims: ChunkClaims) -> None:
        self._pod = pod
        self._claims = claims

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
        await self._pod.broker.publish(body, exchange=rabbit.DEAD_LETTER_EXCHANGE,
                                       routing_key=routing_key, persist=True)
        await message.ack()

    async def _settle(self, chunk: SendChunk) -> bool:
        """Record the unsent rest as failed and close the chunk; False if it is still held
        (by another sender, or by a delivery of it in this process)."""
        taken = await self._claims.take(chunk.campaign_id, chunk.seq)
        if taken is NotTaken.CLOSED:
            return True
        if taken is NotTaken.BUSY:
            return False
        stores, campaign_id = self._pod.stores, chunk.campaign_id
        recorded = await stores.deliveries.recorded(campaign_id, chunk.seq)
        rest = [position for position in range(len(chunk.recipients)) if position not in recorded]
        failed = sum(error is not None for error in recorded.values())
        sent = len(recorded) - failed
        cancelled = await self._pod.is_cancelled(campaign_id)
        now = utcnow()
        if rest and not cancelled:
            await stores.deliveries.record(campaign_id, chunk.seq, self._pod.id,
                                           [(position, DEAD_LETTERED) for position in rest], now)
            count_outcomes([DEAD_LETTERED] * len(rest))
            failed += len(rest)
        status = ChunkStatus.CANCELLED if cancelled else ChunkStatus.DEAD
        CHUNKS_DEAD_LETTERED.inc()
        log.error("chunk %s:%d dead-lettered; %d recipients recorded as failed", campaign_id,
                  chunk.seq, 0 if cancelled else len(rest))
        if await stores.chunks.finish(campaign_id, chunk.seq, status, sent, failed, now,
                                      owner=self._pod.id):
            CHUNKS.labels(status.value).inc()
            await chunk_finished(stores, campaign_id, sent, failed,
                                 done=status is ChunkStatus.DEAD)
        return True
