"""Sending a chunk: skip what an earlier attempt recorded, send the rest batch by batch, record
each batch before the next, and close the chunk (which may complete the campaign).

The chunk message is acknowledged only after its outcomes are recorded, so a sender that dies
loses nothing: RabbitMQ redelivers the chunk and the next sender skips the recorded recipients.
At worst the batch that was on the wire when the sender died is sent twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from faststream.rabbit.annotations import RabbitMessage

from herald.adapters.chunks import ChunkStatus
from herald.adapters.fcm import TOKEN_IS_DEAD
from herald.adapters.rate_limit import RateLimits
from herald.clock import utcnow
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS, MESSAGES
from herald.runtime import Pod
from herald.service_layer.completion import chunk_finished
from herald.service_layer.recipients import FAILED, SENT
from services.sender.campaigns import CampaignCache, CampaignInfo
from services.sender.claims import ChunkClaims, NotTaken
from services.sender.delivery import BatchResult, BatchSender, Target

log = logging.getLogger(__name__)


class Verdict(Enum):
    ACK = "ack"  # recorded, or nothing to do: the message is settled
    ABORT = "abort"  # the delivery's channel died: RabbitMQ redelivers, nothing to settle
    POISON = "poison"  # failed too often: dead-letter it
    REPUBLISH = "republish"  # took too long for one delivery: hand the rest on as a new message
    BUSY = "busy"  # another live sender holds this chunk: try again a little later


@dataclass
class Tally:
    sent: int = 0
    failed: int = 0
    stopped: bool = False
    recorded_now: int = 0
    """Outcomes this delivery recorded (the rest came from earlier deliveries)."""


class ChunkSender:
    def __init__(self, pod: Pod, cache: CampaignCache, batches: BatchSender,
                 limits: RateLimits, claims: ChunkClaims) -> None:
        self._pod = pod
        self._cache = cache
        self._batches = batches
        self._limits = limits
        self._claims = claims
        self._settings = pod.settings
        self._stopping = False
        # Chunks are prefetched and prepared concurrently, but only HERALD_SENDER_BATCHES_IN_FLIGHT
        # batches (one by default) are on the wire and unrecorded at any time: what a kill -9
        # can cost in duplicates. More hides FCM's round trip better, for a larger bound.
        self._batches_in_flight = asyncio.Semaphore(pod.settings.sender_batches_in_flight)

    async def process(self, chunk: SendChunk, message: RabbitMessage) -> Verdict:
        campaign_id = chunk.campaign_id
        if await self._cache.is_cancelled(campaign_id):
            CHUNKS.labels("dropped").inc()
            return Verdict.ACK
        info = await self._cache.get(campaign_id)
        if info is None:
            CHUNKS.labels("dropped").inc()
            return Verdict.ACK
        before = await self._claims.take(campaign_id, chunk.seq)
        if before is NotTaken.CLOSED:
            return Verdict.ACK
        if before is NotTaken.BUSY:
            return Verdict.BUSY
        if before["attempts"] >= self._settings.chunk_max_attempts:
            log.error("chunk %s:%d failed %d times; dead-lettering it", campaign_id, chunk.seq,
                      before["attempts"])
            return Verdict.POISON
        async with self._pod.tracker.working_on(campaign_id):
            return await self._send(chunk, info, message)

    def stop(self) -> None:
        """Shutting down: finish the batches on the wire, hand the rest of each chunk back."""
        self._stopping = True

    async def _send(self, chunk: SendChunk, info: CampaignInfo, message: RabbitMessage) -> Verdict:
        stores, campaign_id = self._pod.stores, chunk.campaign_id
        # What an earlier delivery recorded (it crashed, was cut off, or handed the rest on).
        recorded = await stores.deliveries.recorded(campaign_id, chunk.seq)
        failed = sum(error is not None for error in recorded.values())
        tally = Tally(sent=len(recorded) - failed, failed=failed)
        todo = [Target(position, r.token) for position, r in enumerate(chunk.recipients)
                if position not in recorded]
        verdict = await self._send_batches(chunk, info, todo, tally, message)
        if verdict is not Verdict.ACK or (tally.stopped and not tally.recorded_now):
            return verdict  # a cancel before this delivery sent anything: nothing to close
        status = ChunkStatus.CANCELLED if tally.stopped else ChunkStatus.DONE
        if await stores.chunks.finish(campaign_id, chunk.seq, status, tally.sent, tally.failed,
                                      utcnow(), owner=self._pod.id):
            CHUNKS.labels(status.value).inc()
            await chunk_finished(stores, campaign_id, tally.sent, tally.failed,
                                 done=status is ChunkStatus.DONE)
        return Verdict.ACK

    async def _send_batches(self, chunk: SendChunk, info: CampaignInfo, todo: list[Target],
                            tally: Tally, message: RabbitMessage) -> Verdict:
        size = self._settings.sender_batch_size
        started = time.monotonic()
        campaign_bucket = self._limits.for_campaign(chunk.campaign_id, info.rate_per_s)
        for start in range(0, len(todo), size):
            async with self._batches_in_flight:
                verdict = await self._before_batch(chunk, message, started, tally)
                if verdict is not None:
                    return verdict
                result = await self._batches.send(
                    info.template, todo[start:start + size],
                    self._pod.watch.event(chunk.campaign_id), campaign_bucket)
                await self._record(chunk, result, tally)
            if result.stopped:
                tally.stopped = True
                return Verdict.ACK
        return Verdict.ACK

    async def _before_batch(self, chunk: SendChunk, message: RabbitMessage, started: float,
                            tally: Tally) -> Verdict | None:
        """Whether this chunk may send another batch; the verdict if it must stop here."""
        if message.raw_message.channel.is_closed:
            return Verdict.ABORT
        if self._stopping or time.monotonic() - started > self._settings.chunk_budget_s:
            return Verdict.REPUBLISH
        if await self._cache.is_cancelled(chunk.campaign_id):
            tally.stopped = True
            return Verdict.ACK
        return None

    async def _record(self, chunk: SendChunk, result: BatchResult, tally: Tally) -> None:
        """Write the batch's outcomes; then the campaign's live counters and dead tokens."""
        if not result.outcomes:
            return
        stores, now = self._pod.stores, utcnow()
        rows = [(o.target.position, o.error.value if o.error else None) for o in result.outcomes]
        await stores.deliveries.record(chunk.campaign_id, chunk.seq, self._pod.id, rows, now)
        failed = sum(error is not None for _, error in rows)
        tally.sent += len(rows) - failed
        tally.failed += failed
        tally.recorded_now += len(rows)
        for error in TOKEN_IS_DEAD:
            dead = [o.target.token for o in result.outcomes if o.error is error]
            if dead:
                await stores.devices.mark_invalid(dead, error.value, now)
        count_outcomes(error for _, error in rows)


def count_outcomes(errors: Iterable[str | None]) -> None:
    """Add recorded outcomes to ``herald_messages_total{outcome, error}``."""
    for error, n in Counter(errors).items():
        MESSAGES.labels(SENT if error is None else FAILED, error or "").inc(n)
