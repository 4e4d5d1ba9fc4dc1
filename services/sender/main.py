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
from services.sender.claims import ChunkClaims
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
        self._claims = ChunkClaims(pod, settings.chunk_budget_s + settings.grace_period_s)
        self._chunks = ChunkSender(pod, CampaignCache(pod), batches, limits, self._claims)
        self._dead = DeadChunks(pod, self._claims)
        rabbit.consume(pod.broker, rabbit.CHUNKS_QUEUE, self._on_chunk,
                       prefetch=settings.sender_prefetch)
        rabbit.consume(pod.broker, rabbit.DEAD_CHUNKS_QUEUE, self._dead.handle, prefetch=1)

    async def close(self) -> None:
        await self._session.close()

    async def stop(self) -> None:
        self._chunks.stop()

    async def _on_chunk(self, message: RabbitMessage) -> None:
        try:
            chunk = SendChunk.model_validate_json(message.body)
        except ValidationError as exc:
            log.error("malformed chunk message dead-lettered: %s", exc.errors(include_url=False))
            await message.reject(requeue=False)
            return
        # Settled while still marked as in hand here: a copy or redelivery of this chunk that
        # reaches this process meanwhile waits, instead of taking a hold that the settling of
        # this delivery would then release under it.
        with self._claims.first_here(chunk.campaign_id, chunk.seq) as first:
            verdict = await self._process(chunk, message) if first else Verdict.BUSY
            if verdict is not None:
                await self._settle(verdict, chunk, message)

    async def _process(self, chunk: SendChunk, message: RabbitMessage) -> Verdict | None:
        """Send the chunk; None when it was handed back already (it failed)."""
        try:
            return await self._chunks.process(chunk, message)
        except asyncio.CancelledError:  # the channel closed under us: RabbitMQ redelivers
            await asyncio.shield(self._claims.release(chunk.campaign_id, chunk.seq, refund=True))
            raise
        except INFRASTRUCTURE_ERRORS as exc:
            log.warning("chunk %s:%d interrupted by an outage (%s); handing it back",
                        chunk.campaign_id, chunk.seq, type(exc).__name__)
            await self._hand_back(chunk, message, refund=True)
        except Exception:
            log.exception("chunk %s:%d failed; handing it back", chunk.campaign_id, chunk.seq)
            await self._hand_back(chunk, message, refund=False)
        return None

    async def _hand_back(self, chunk: SendChunk, message: RabbitMessage, *, refund: bool) -> None:
        """Release the chunk and queue it again after a pause; an outage (``refund``) does not
        count as one of the chunk's attempts."""
        await self._claims.release(chunk.campaign_id, chunk.seq, refund=refund)
        await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
        await self._requeue(chunk, message)

    async def _requeue(self, chunk: SendChunk, message: RabbitMessage) -> None:
        """Queue a fresh copy and acknowledge this one. Unlike a nack, this is not a failed
        delivery: quorum queues count every nack towards their delivery limit on RabbitMQ 3.10,
        and an outage must not dead-letter healthy chunks."""
        try:
            await self._pod.bus.send_chunk(chunk)
            await message.ack()
        except INFRASTRUCTURE_ERRORS:  # RabbitMQ itself is away: it requeues the delivery
            with contextlib.suppress(*INFRASTRUCTURE_ERRORS):
                await message.nack(requeue=True)

    async def _settle(self, verdict: Verdict, chunk: SendChunk, message: RabbitMessage) -> None:
        claims = self._claims
        try:
            if verdict is Verdict.ACK:
                await message.ack()
            elif verdict is Verdict.POISON:
                await claims.release(chunk.campaign_id, chunk.seq, refund=False)
                await message.reject(requeue=False)
            elif verdict is Verdict.REPUBLISH:  # let go first: the copy may go to anyone
                await claims.release(chunk.campaign_id, chunk.seq, refund=True)
                await self._requeue(chunk, message)
            elif verdict is Verdict.BUSY:
                CHUNKS_DEFERRED.inc()
                await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
                await self._requeue(chunk, message)
            else:  # ABORT: the channel is gone and RabbitMQ requeued the message already
                await claims.release(chunk.campaign_id, chunk.seq, refund=True)
        except INFRASTRUCTURE_ERRORS:
            # The channel went away after the chunk was recorded: RabbitMQ redelivers it, and
            # the next sender finds it closed and only acknowledges it.
            log.warning("could not settle chunk %s:%d; it will be redelivered and skipped",
                        chunk.campaign_id, chunk.seq)


def build(pod: Pod) -> Sender:
    return Sender(pod)
