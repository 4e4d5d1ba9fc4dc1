"""Composition root of the sender: FCM client, rate limits, and the chunk consumers."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald import names
from herald.adapters import fcm, rabbit
from herald.adapters.device_pace import RedisDevicePace
from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.adapters.rate_limit import RedisRateLimits as RateLimits
from herald.adapters.redis import Redis
from herald.domain.lanes import Route
from herald.domain.messages import SendChunk
from herald.domain.pace import interval_ms
from herald.domain.status import Verdict
from herald.names import RedisKeys
from herald.observability import CHUNKS_DEFERRED
from herald.runtime.rules import marketing_cap
from herald.runtime.worker import PodParts, Worker
from herald.service_layer.ports import Bus, DevicePace
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.sending.capping import Capping
from herald.service_layer.sending.chunk import ChunkSender, SendingPolicy, Settlement
from herald.service_layer.sending.claims import ChunkClaims
from herald.service_layer.sending.dead_chunks import DeadChunks
from herald.service_layer.sending.lifecycle import ChunkLifecycle
from herald.service_layer.sending.refusals import CampaignRefusals
from herald.service_layer.sending.window import NO_PACE, SendWindow, WindowPolicy
from herald.settings import Settings
from services.sender.dead_letters import DeadChunkConsumer

log = logging.getLogger(__name__)


RELEASE_RETRY_FIRST_S = 0.2
RELEASE_RETRY_MAX_S = 5.0


class Sender(Worker):
    """The consumer of ``herald.chunks``: it parses a message, runs the use case
    (``herald/service_layer/sending/chunk.py``) and settles the message by its verdict, in one
    place (``_settle``), which is also the one place that lets go of the chunk's claim."""

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
            verdict = await self._process(chunk, message) if first else Settlement.BUSY
            await self._settle(verdict, chunk, message)

    async def _process(self, chunk: SendChunk, message: RabbitMessage) -> Settlement:
        try:
            return await self._chunks.process(chunk, lambda: channel_closed(message))
        except asyncio.CancelledError:  # the channel closed under us: RabbitMQ redelivers
            await asyncio.shield(self._let_go(chunk, refund=True))
            raise
        except INFRASTRUCTURE_ERRORS as exc:
            log.warning("chunk %s:%d interrupted by an outage (%s); handing it back",
                        chunk.campaign_id, chunk.seq, type(exc).__name__)
            return Settlement.HAND_BACK
        except Exception:
            log.exception("chunk %s:%d failed; handing it back", chunk.campaign_id, chunk.seq)
            return Settlement.FAILED

    async def _settle(self, verdict: Settlement, chunk: SendChunk, message: RabbitMessage) -> None:
        try:
            if verdict in LET_GO:
                await self._let_go(chunk, refund=verdict is not Settlement.POISON
                                   and verdict is not Settlement.FAILED)
            if verdict in (Settlement.ACK, Settlement.GONE, Settlement.HOLD):
                await message.ack()
            elif verdict is Settlement.POISON:
                await message.reject(requeue=False)
            elif verdict is Settlement.UNEXPLAINED:
                await self._bus.dead_letter(message.body, names.DEAD_MESSAGES_ROUTING_KEY)
                await message.ack()
            elif verdict is not Settlement.ABORT:  # ABORT: RabbitMQ requeued it already
                await self._requeue(verdict, chunk, message)
        except INFRASTRUCTURE_ERRORS:
            # The channel went away after the chunk was recorded: RabbitMQ redelivers it, and
            # the next sender finds it closed and only acknowledges it.
            log.warning("could not settle chunk %s:%d; it will be redelivered and skipped",
                        chunk.campaign_id, chunk.seq)

    async def _requeue(self, verdict: Settlement, chunk: SendChunk, message: RabbitMessage) -> None:
        """Queue a fresh copy and acknowledge this one, after a pause unless the chunk only ran
        out of time. Unlike a nack, this is not a failed delivery: quorum queues count every
        nack towards their delivery limit on RabbitMQ 3.10, and an outage must not dead-letter
        healthy chunks."""
        if verdict is Settlement.BUSY:
            CHUNKS_DEFERRED.inc()
        if verdict is not Settlement.REPUBLISH:
            await asyncio.sleep(rabbit.REDELIVERY_PAUSE_S)
        try:
            await self._bus.send_chunk(chunk)
            await message.ack()
        except INFRASTRUCTURE_ERRORS:  # RabbitMQ itself is away: it requeues the delivery
            with contextlib.suppress(*INFRASTRUCTURE_ERRORS):
                await message.nack(requeue=True)

    async def _let_go(self, chunk: SendChunk, *, refund: bool) -> None:
        """Give the chunk's claim back before anyone else is offered it, trying again through
        an outage (a claim left behind would make every other sender answer BUSY until it
        expires); an outage or a hand-over (``refund``) is not one of the chunk's attempts."""
        pause = RELEASE_RETRY_FIRST_S
        while True:
            try:
                await self._claims.release(chunk.campaign_id, chunk.seq, refund=refund)
                return
            except INFRASTRUCTURE_ERRORS as exc:
                log.warning("releasing chunk %s:%d failed (%s); trying again in %.1f s",
                            chunk.campaign_id, chunk.seq, type(exc).__name__, pause)
            await asyncio.sleep(pause)
            pause = min(RELEASE_RETRY_MAX_S, pause * 2)


LET_GO = frozenset({Settlement.POISON, Settlement.REPUBLISH, Settlement.ABORT, Settlement.HAND_BACK,
                    Settlement.FAILED, Settlement.HOLD})
"""Verdicts after which this pod gives the chunk's claim back."""


def is_outage(failure: BaseException) -> bool:
    return isinstance(failure, INFRASTRUCTURE_ERRORS)


def channel_closed(message: RabbitMessage) -> bool:
    """Whether the channel this delivery came on is gone (RabbitMQ requeued it then)."""
    return bool(message.raw_message.channel.is_closed)


def device_pace(settings: Settings, redis: Redis, keys: RedisKeys) -> DevicePace:
    """``HERALD_DEVICE_RATE_PER_MIN`` in Redis, or no pace at all (0)."""
    interval = interval_ms(settings.device_rate_per_min)
    return NO_PACE if interval is None else RedisDevicePace(redis, keys, interval)


def compose(parts: PodParts) -> Sender:
    settings, resources, pod_id = parts.settings, parts.resources, parts.identity.id
    cap = marketing_cap(settings)  # before anything is opened
    stores, broker = resources.stores, resources.broker
    session = fcm.open_session(settings)
    tokens = fcm.access_tokens(settings)
    client = fcm.FcmClient(session, settings, tokens)
    limits = RateLimits(resources.redis, resources.keys, settings.project_rate_per_s,
                        settings.urgent_reserve_share)
    window = SendWindow(client, WindowPolicy(connections=settings.sender_concurrency,
                                             unrecorded=settings.sender_batch_size,
                                             max_retries=settings.fcm_max_retries,
                                             is_outage=is_outage),
                        limits.project, pace=device_pace(settings, resources.redis,
                                                         resources.keys))
    lifecycle = ChunkLifecycle(stores, pod_id, settled=parts.settler.settled)
    claims = ChunkClaims(stores.chunks, resources.registry, pod_id,
                         settings.chunk_budget_s + settings.grace_period_s)
    policy = SendingPolicy(max_attempts=settings.chunk_max_attempts,
                           budget_s=settings.chunk_budget_s,
                           heartbeat_interval_s=settings.heartbeat_interval_s)
    refusals = CampaignRefusals(parts.view, parts.decider.stop_for_error,
                                parts.background.spawn)
    capping = Capping(RedisFrequencyCaps(resources.redis, resources.keys), cap)
    chunks = ChunkSender(lifecycle, CampaignCache(stores.campaigns, parts.view), window, limits,
                         claims, parts.tracker.working_on, policy, refusals, parts.fence,
                         settle=parts.settler.settle, capping=capping)
    closing = contextlib.AsyncExitStack()
    closing.push_async_callback(session.close)
    closing.callback(client.close)
    if tokens is not None:
        closing.callback(tokens.close)
    sender = Sender(chunks, claims, resources.bus, closing)
    view = parts.view

    async def stopped(campaign_id: str) -> bool:
        return await view.verdict(campaign_id) is Verdict.STOP

    dead = DeadChunkConsumer(DeadChunks(lifecycle, claims, stopped, stores.campaigns),
                             resources.bus.dead_letter)
    for route, queue in rabbit.CHUNK_QUEUES.items():
        # Each route on a channel of its own: an urgent chunk is delivered however many
        # standard, bulk or paced chunks this sender holds.
        prefetch = (settings.sender_paced_prefetch if route is Route.PACED
                    else settings.sender_prefetch)
        rabbit.consume(broker, queue, sender.on_chunk, prefetch=prefetch)
    rabbit.consume(broker, rabbit.DEAD_CHUNKS_QUEUE, dead.handle,
                   prefetch=rabbit.DEAD_LETTER_PREFETCH)
    return sender
