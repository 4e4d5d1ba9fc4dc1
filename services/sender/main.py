"""Composition root of the sender: FCM client, rate limits, and the chunk consumers."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald.adapters import fcm, rabbit
from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.adapters.rate_limit import RedisRateLimits as RateLimits
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS_DEFERRED
from herald.runtime.worker import PodParts, Worker
from herald.service_layer.ports import Bus
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.sending.chunk import ChunkSender, SendingPolicy, Verdict
from herald.service_layer.sending.claims import ChunkClaims
from herald.service_layer.sending.dead_chunks import DeadChunks
from herald.service_layer.sending.lifecycle import ChunkLifecycle
from herald.service_layer.sending.refusals import CampaignRefusals
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from services.sender.dead_letters import DeadChunkConsumer

log = logging.getLogger(__name__)


class Sender(Worker):
    def __init__(self, chunks: ChunkSender, claims: ChunkClaims, bus: Bus,
                 close: contextlib.AsyncExitStack) -> None:
        self._chunks = chunks
        self._claims = claims
        self._bus = bus
        self._resources = close

    async def close(self) -> None:
        await self._resources.aclose()

    async def stop(self) -> None:
        self._chunks.stop()

    async def on_chunk(self, message: RabbitMessage) -> None:
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
            return await self._chunks.process(chunk, lambda: channel_closed(message))
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
            await self._bus.send_chunk(chunk)
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


def channel_closed(message: RabbitMessage) -> bool:
    """Whether the channel this delivery came on is gone (RabbitMQ requeued it then)."""
    return bool(message.raw_message.channel.is_closed)


def compose(parts: PodParts) -> Sender:
    settings, resources, pod_id = parts.settings, parts.resources, parts.identity.id
    stores, broker = resources.stores, resources.broker
    session = fcm.open_session(settings)
    tokens = fcm.access_tokens(settings)
    client = fcm.FcmClient(session, settings, tokens)
    limits = RateLimits(resources.redis, resources.keys, settings.fcm_rate_per_min)
    window = SendWindow(client, WindowPolicy(connections=settings.sender_concurrency,
                                             unrecorded=settings.sender_batch_size,
                                             max_retries=settings.fcm_max_retries),
                        limits.project)
    lifecycle = ChunkLifecycle(stores, pod_id)
    claims = ChunkClaims(stores.chunks, resources.registry, pod_id,
                         settings.chunk_budget_s + settings.grace_period_s)
    policy = SendingPolicy(max_attempts=settings.chunk_max_attempts,
                           budget_s=settings.chunk_budget_s)
    refusals = CampaignRefusals(parts.watch, parts.cancellation.stop_for_error,
                                parts.background.spawn)
    chunks = ChunkSender(lifecycle, CampaignCache(stores.campaigns, parts.watch), window, limits,
                         claims, parts.tracker.working_on, parts.watch.event, policy, refusals)
    closing = contextlib.AsyncExitStack()
    closing.push_async_callback(session.close)
    if tokens is not None:
        closing.callback(tokens.close)
    sender = Sender(chunks, claims, resources.bus, closing)
    dead = DeadChunkConsumer(DeadChunks(lifecycle, claims, parts.watch.is_cancelled),
                             resources.bus.dead_letter)
    rabbit.consume(broker, rabbit.CHUNKS_QUEUE, sender.on_chunk, prefetch=settings.sender_prefetch)
    rabbit.consume(broker, rabbit.DEAD_CHUNKS_QUEUE, dead.handle,
                   prefetch=rabbit.DEAD_LETTER_PREFETCH)
    return sender
