"""Composition root of the sender: FCM client, rate limits, and the chunk consumers."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald.adapters import fcm, rabbit
from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.adapters.rate_limit import RateLimits
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS_DEFERRED
from herald.runtime import Pod, Worker
from services.sender.campaigns import CampaignCache
from services.sender.chunks import ChunkSender, Verdict
from services.sender.dead_letters import DeadChunks
from services.sender.delivery import BatchSender

log = logging.getLogger(__name__)


class Sender(Worker):
    def __init__(self, pod: Pod) -> None:
        self._pod = pod
        settings = pod.settings
        self._session = fcm.open_session(settings)
        client = fcm.FcmClient(self._session, settings, fcm.access_tokens(settings))
        limits = RateLimits(pod.redis, pod.keys, settings.fcm_rate_per_min)
        batches = BatchSender(client, settings.sender_concurrency, settings.fcm_max_retries,
                              limits.project)
        self._chunks = ChunkSender(pod, CampaignCache(pod), batches, limits)
        self._dead = DeadChunks(pod)
        rabbit.consume(pod.broker, rabbit.CHUNKS_QUEUE, self._on_chunk,
                       prefetch=settings.sender_prefetch)
        rabbit.consume(pod.broker, rabbit.DEAD_CHUNKS_QUEUE, self._dead.handle, prefetch=1)

    async def close(self) -> None:
        await self._session.close()

    async def _on_chunk(self, message: RabbitMessage) -> None:
        try:
            chunk = SendChunk.model_validate_json(message.body)
        except ValidationError as exc:
            log.error("malformed chunk message dead-lettered: %s", exc.errors(include_url=False))
            await message.reject(requeue=False)
            return
        try:
            verdict = await self._chunks.process(chunk, message)
        except INFRASTRUCTURE_ERRORS as exc:
            log.warning("chunk %s:%d interrupted by an outage (%s); handing it back",
                        chunk.campaign_id, chunk.seq, type(exc).__name__)
            await self._hand_back(chunk, message, refund=True)
            return
        except Exception:
            log.exception("chunk %s:%d failed; handing it back", chunk.campaign_id, chunk.seq)
            await self._hand_back(chunk, message, refund=False)
            return
        try:
            await self._settle(verdict, chunk, message)
        except INFRASTRUCTURE_ERRORS:
            # The channel went away after the chunk was recorded: RabbitMQ redelivers it, and
            # the next sender finds it closed and only acknowledges it.
            log.warning("could not settle chunk %s:%d; it will be redelivered and skipped",
                        chunk.campaign_id, chunk.seq)

    async def _hand_back(self, chunk: SendChunk, message: RabbitMessage, *, refund: bool) -> None:
        """Release the chunk and requeue it after a pause; an outage (``refund``) does not
        count as one of the chunk's attempts."""
        with contextlib.suppress(*INFRASTRUCTURE_ERRORS):
            await self._pod.stores.chunks.release(chunk.campaign_id, chunk.seq, self._pod.id,
                                                  refund=refund)
        await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
        with contextlib.suppress(*INFRASTRUCTURE_ERRORS):
            await message.nack(requeue=True)

    async def _settle(self, verdict: Verdict, chunk: SendChunk, message: RabbitMessage) -> None:
        chunks = self._pod.stores.chunks
        if verdict is Verdict.ACK:
            await message.ack()
        elif verdict is Verdict.POISON:
            await chunks.release(chunk.campaign_id, chunk.seq, self._pod.id, refund=False)
            await message.reject(requeue=False)
        elif verdict is Verdict.REPUBLISH:
            await chunks.release(chunk.campaign_id, chunk.seq, self._pod.id, refund=True)
            await self._pod.bus.send_chunk(chunk)
            await message.ack()
        elif verdict is Verdict.BUSY:
            CHUNKS_DEFERRED.inc()
            await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
            await message.nack(requeue=True)
        else:  # ABORT: the channel is gone and RabbitMQ requeued the message already
            await chunks.release(chunk.campaign_id, chunk.seq, self._pod.id, refund=True)


def build(pod: Pod) -> Sender:
    return Sender(pod)
