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
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from herald.adapters.rate_limit import RateLimits
from herald.domain.messages import SendChunk
from herald.observability import CHUNKS
from herald.runtime.tracking import WorkTracker
from herald.service_layer.chunk_lifecycle import ChunkLifecycle, Tally, dead_tokens_of
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


@dataclass(frozen=True)
class SendingPolicy:
    batch_size: int
    batches_in_flight: int
    max_attempts: int
    budget_s: float


class ChunkSender:
    def __init__(self, lifecycle: ChunkLifecycle, cache: CampaignCache, batches: BatchSender,
                 limits: RateLimits, claims: ChunkClaims, tracker: WorkTracker,
                 cancelled_event: Callable[[str], asyncio.Event], policy: SendingPolicy) -> None:
        self._lifecycle = lifecycle
        self._cache = cache
        self._batches = batches
        self._limits = limits
        self._claims = claims
        self._tracker = tracker
        self._cancelled_event = cancelled_event
        self._policy = policy
        self._stopping = False
        # Chunks are prefetched and prepared concurrently, but only HERALD_SENDER_BATCHES_IN_FLIGHT
        # batches (one by default) are on the wire and unrecorded at any time: what a kill -9
        # can cost in duplicates. More hides FCM's round trip better, for a larger bound.
        self._batches_in_flight = asyncio.Semaphore(policy.batches_in_flight)

    async def process(self, chunk: SendChunk, channel_closed: Callable[[], bool]) -> Verdict:
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
        if before.attempts >= self._policy.max_attempts:
            log.error("chunk %s:%d failed %d times; dead-lettering it", campaign_id, chunk.seq,
                      before.attempts)
            return Verdict.POISON
        async with self._tracker.working_on(campaign_id):
            return await self._send(chunk, info, channel_closed)

    def stop(self) -> None:
        """Shutting down: finish the batches on the wire, hand the rest of each chunk back."""
        self._stopping = True

    async def _send(self, chunk: SendChunk, info: CampaignInfo,
                    channel_closed: Callable[[], bool]) -> Verdict:
        recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq)
        tally = Tally.of(recorded)
        todo = [Target(position, r.token) for position, r in enumerate(chunk.recipients)
                if position not in recorded]
        verdict = await self._send_batches(chunk, info, todo, tally, channel_closed)
        if verdict is not Verdict.ACK or (tally.stopped and not tally.recorded_now):
            return verdict  # a cancel before this delivery sent anything: nothing to close
        await self._lifecycle.close(chunk.campaign_id, chunk.seq, tally.status, tally)
        return Verdict.ACK

    async def _send_batches(self, chunk: SendChunk, info: CampaignInfo, todo: list[Target],
                            tally: Tally, channel_closed: Callable[[], bool]) -> Verdict:
        size = self._policy.batch_size
        started = time.monotonic()
        campaign_bucket = self._limits.for_campaign(chunk.campaign_id, info.rate_per_s)
        for start in range(0, len(todo), size):
            async with self._batches_in_flight:
                verdict = await self._before_batch(chunk, channel_closed, started, tally)
                if verdict is not None:
                    return verdict
                result = await self._batches.send(
                    info.template, todo[start:start + size],
                    self._cancelled_event(chunk.campaign_id), campaign_bucket)
                await self._record(chunk, result, tally)
            if result.stopped:
                tally.stopped = True
                return Verdict.ACK
        return Verdict.ACK

    async def _before_batch(self, chunk: SendChunk, channel_closed: Callable[[], bool],
                            started: float, tally: Tally) -> Verdict | None:
        """Whether this chunk may send another batch; the verdict if it must stop here."""
        if channel_closed():
            return Verdict.ABORT
        if self._stopping or time.monotonic() - started > self._policy.budget_s:
            return Verdict.REPUBLISH
        if await self._cache.is_cancelled(chunk.campaign_id):
            tally.stopped = True
            return Verdict.ACK
        return None

    async def _record(self, chunk: SendChunk, result: BatchResult, tally: Tally) -> None:
        """Write the batch's outcomes; then the campaign's live counters and dead tokens."""
        outcomes = [(o.target.position, o.error.value if o.error else None)
                    for o in result.outcomes]
        dead = dead_tokens_of((o.target.token, o.error.value if o.error else None)
                              for o in result.outcomes)
        await self._lifecycle.record(chunk.campaign_id, chunk.seq, outcomes, tally, dead)
