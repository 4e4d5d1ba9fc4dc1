"""The consumer of ``herald.chunks.dead``: each chunk RabbitMQ gave up on is settled by the
service layer (``herald/service_layer/sending/dead_chunks.py``), then acknowledged; one still
held elsewhere goes round again after a pause; a malformed message moves to ``herald.dead``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald import names
from herald.adapters import rabbit
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS_DEFERRED
from herald.service_layer.sending.dead_chunks import DeadChunks

log = logging.getLogger(__name__)

Forward = Callable[[bytes, str], Awaitable[None]]
"""Publish a message body to the dead-letter exchange with a routing key."""


class DeadChunkConsumer:
    def __init__(self, dead_chunks: DeadChunks, forward: Forward) -> None:
        self._dead_chunks = dead_chunks
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
            settled = await self._dead_chunks.settle(chunk)
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
