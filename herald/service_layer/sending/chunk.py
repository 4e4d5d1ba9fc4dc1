"""Sending a chunk: skip what an earlier attempt recorded, hold back whom the frequency cap
holds back (``capping.py``: recorded ``suppressed`` before any request), send the rest through
the pod's window (``window.py``), and close the chunk (which may complete the campaign).

The chunk message is acknowledged only after all its outcomes are recorded, so a sender that dies
loses nothing: RabbitMQ redelivers the chunk and the next sender skips the recorded recipients.
At worst the requests started and not yet recorded when the sender died are sent twice: the
window keeps those to one batch (``HERALD_SENDER_BATCH_SIZE``) for the whole pod.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import Enum

from herald.domain.documents import ChunkState, Recorded
from herald.domain.fcm_errors import ERASED, FcmError, SendResult
from herald.domain.messages import Recipient, SendChunk
from herald.domain.outcomes import RecipientOutcome, Target, dead_tokens
from herald.domain.rendering import CompiledContent
from herald.domain.status import Verdict as May
from herald.domain.suppression import suppressed_code
from herald.observability import CHUNKS
from herald.service_layer.ports import RateLimits
from herald.service_layer.sending.campaigns import UNKNOWN, CampaignCache, CampaignInfo
from herald.service_layer.sending.capping import Capping, Screened
from herald.service_layer.sending.claims import ChunkClaims, NotTaken
from herald.service_layer.sending.fence import Fence
from herald.service_layer.sending.lifecycle import ChunkLifecycle, Tally
from herald.service_layer.sending.refusals import CampaignRefusals
from herald.service_layer.sending.window import SendWindow

WorkingOn = Callable[[str], AbstractAsyncContextManager[None]]
"""Marks this pod busy with a campaign while the block runs (its heartbeat says so)."""
Settle = Callable[[str], Awaitable[object]]
"""Report a campaign to the settler (``stopping/settle.py``)."""


async def _no_settler(_campaign_id: str) -> None:
    return None


log = logging.getLogger(__name__)


class Settlement(Enum):
    ACK = "ack"  # recorded, or nothing to do: the message is settled
    ABORT = "abort"  # the delivery's channel died: RabbitMQ redelivers, nothing to settle
    POISON = "poison"  # failed too often: dead-letter it
    REPUBLISH = "republish"  # took too long for one delivery: hand the rest on as a new message
    BUSY = "busy"  # another live sender holds this chunk: try again a little later
    GONE = "gone"  # this pod was away; the chunk is someone else's now, or its campaign ended
    UNEXPLAINED = "unexplained"  # no such campaign or chunk: dead-letter it, with a WARNING
    HAND_BACK = "hand_back"  # interrupted by an outage: queue it again, no attempt counted
    HOLD = "hold"  # paused: the chunk stays pending (its claim given back); a resume offers it
    FAILED = "failed"  # failed for another reason: queue it again, one attempt counted


@dataclass(frozen=True)
class SendingPolicy:
    max_attempts: int
    budget_s: float
    heartbeat_interval_s: float = 2.0


UNFENCED = Fence(float("inf"), 1.0)
"""A fence that always holds (tests of what a fence does not concern)."""
NO_CAP = Capping(None, None)
"""No frequency cap anywhere (tests of what the cap does not concern)."""


@dataclass
class _Hold:
    """This delivery's hold on its chunk: the claim's fencing token and the fence's epoch at
    which it was last established."""

    token: int
    epoch: int
    first_delivery: bool = False
    """No delivery held the chunk before this one (no attempt counted, no holder): nothing of
    it can be recorded yet."""


class ChunkSender:
    def __init__(self, lifecycle: ChunkLifecycle, cache: CampaignCache, window: SendWindow,
                 limits: RateLimits, claims: ChunkClaims, working_on: WorkingOn,
                 policy: SendingPolicy, refusals: CampaignRefusals | None = None,
                 fence: Fence = UNFENCED, settle: Settle = _no_settler,
                 capping: Capping = NO_CAP) -> None:
        self._lifecycle = lifecycle
        self._capping = capping
        self._fence = fence
        self._refusals = refusals
        self._cache = cache
        self._window = window
        self._limits = limits
        self._claims = claims
        self._working_on = working_on
        self._settle = settle
        self._policy = policy
        self._stopping = False

    async def process(self, chunk: SendChunk, channel_closed: Callable[[], bool]) -> Settlement:
        campaign_id = chunk.campaign_id
        info = await self._cache.get(campaign_id)
        if info == UNKNOWN:
            return _unexplained(chunk, "no such campaign")
        may = await self._cache.verdict(campaign_id)
        if may is May.HOLD:  # a chunk offered for a held campaign: was it resumed meanwhile?
            may = await self._cache.verdict_from_store(campaign_id)
        if may is not May.SEND or not isinstance(info, CampaignInfo):
            CHUNKS.labels("held" if may is May.HOLD else "dropped").inc()
            return Settlement.ACK  # never claimed: a held chunk stays pending, offered again later
        if info.rollout is not None:  # the wave may have moved on since it was read
            await self._cache.refresh(campaign_id, now=True)
        hold = _Hold(0, self._fence.epoch)  # read before the claim: a gap after it trips
        before = await self._claims.take(campaign_id, chunk.seq)
        if isinstance(before, NotTaken):
            return _not_taken(chunk, before)
        if before.size != len(chunk.recipients):
            return _unexplained(chunk, f"{len(chunk.recipients)} recipients where the chunk "
                                       f"written has {before.size}")
        if before.attempts >= self._policy.max_attempts:
            log.error("chunk %s:%d failed %d times; dead-lettering it", campaign_id, chunk.seq,
                      before.attempts)
            return Settlement.POISON
        hold.token = before.fence + 1
        hold.first_delivery = before.attempts == 0 and before.owner is None and before.fence == 0
        chunk = await self._as_stored_if_erased(chunk, before)
        async with self._working_on(campaign_id):
            return await self._send(chunk, info, channel_closed, hold)

    async def _as_stored_if_erased(self, chunk: SendChunk, before: ChunkState) -> SendChunk:
        """The message, unless someone in it was erased since it was published (the message
        still carries them): then the chunk as stored, their places held by placeholders."""
        if not before.erased:
            return chunk
        return await self._claims.as_stored(chunk)

    def stop(self) -> None:
        """Shutting down: finish the requests on the wire, hand the rest of each chunk back."""
        self._stopping = True

    async def _send(self, chunk: SendChunk, info: CampaignInfo,
                    channel_closed: Callable[[], bool], hold: _Hold) -> Settlement:
        # A chunk nobody held before has nothing recorded: no read (one round trip less before
        # the first request of every chunk).
        recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq) \
            if hold.first_delivery is False else {}
        tally = Tally.of(recorded)
        tally.lane = info.lane
        self._cache.note_first_request(chunk.campaign_id, info)
        wave = info.wave
        while True:
            todo, refused = targets(chunk, recorded, info.content,
                                    lambda token: info.admits(chunk.campaign_id, token, wave))
            if refused:  # recorded failed at once: no request can carry their message
                await self._record(chunk, refused, tally)
            screened = await self._screened(chunk, info, todo, tally)
            verdict = await self._send_window(chunk, info, screened, tally, channel_closed, hold)
            await self._capping.release(screened)
            if self._fence.holds(hold.epoch):
                break
            if not await self._come_back(chunk, hold):  # away: established again, or gone
                return Settlement.GONE
            recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq)
        if verdict is Settlement.HOLD and \
                await self._cache.verdict_from_store(chunk.campaign_id) is May.SEND:
            return Settlement.REPUBLISH  # held by a pause resumed since: the rest goes on now
        if verdict is not Settlement.ACK or (tally.stopped and not tally.recorded_now):
            return verdict  # a cancel before this delivery sent anything: nothing to close
        if not tally.stopped and tally.done < len(chunk.recipients):
            return await self._not_all_sent(chunk, info, wave, tally)
        await self._lifecycle.close(chunk.campaign_id, chunk.seq, tally.status, tally)
        return Settlement.ACK

    async def _not_all_sent(self, chunk: SendChunk, info: CampaignInfo, wave: int,
                            tally: Tally) -> Settlement:
        """A chunk is never closed with recipients that have no outcome. Those of a staged
        rollout's later waves wait, the chunk pending, for their wave (it offers every pending
        chunk again); any other (a pause lifted before this delivery stopped) goes on as a new
        message."""
        admitted = sum(info.admits(chunk.campaign_id, r.token, wave) for r in chunk.recipients)
        if tally.done >= admitted:
            await self._lifecycle.wave_sent(chunk.campaign_id, chunk.seq, wave)
            return Settlement.HOLD
        return Settlement.REPUBLISH

    async def _come_back(self, chunk: SendChunk, hold: _Hold) -> bool:
        """This pod was away longer than its heartbeat lives (frozen, or cut off from the
        registry): before anything more is sent, its heartbeat must land again, its claim on
        the chunk must still be its own (renewed with the fencing token) and the campaign must
        still be sending, read from the store. False if not: the chunk is left alone."""
        campaign_id = chunk.campaign_id
        log.warning("chunk %s:%d: this pod was away longer than its heartbeat lives; "
                    "re-establishing its claim before sending more", campaign_id, chunk.seq)
        if not await self._fence.confirmed(3 * self._policy.heartbeat_interval_s):
            # Still cut off from the registry: an outage, the chunk is handed back (refunded).
            raise ConnectionError("this pod's heartbeat does not reach the registry")
        epoch = self._fence.epoch
        token = await self._claims.renew(campaign_id, chunk.seq, hold.token)
        if token is None or await self._cache.verdict_from_store(campaign_id) is not May.SEND:
            log.warning("chunk %s:%d: %s; sending nothing more of it", campaign_id, chunk.seq,
                        "taken over by another pod" if token is None else "campaign not sending")
            await self._settle(campaign_id)  # answers it recorded late may change final counts
            return False
        hold.token, hold.epoch = token, epoch
        return True

    async def _screened(self, chunk: SendChunk, info: CampaignInfo, todo: list[Target],
                        tally: Tally) -> Screened:
        """The recipients to send once the frequency cap has held back whom it holds back
        (recorded ``suppressed`` before any request, ``capping.py``)."""
        screened = await self._capping.screen(
            chunk, self._capping.rule(info.purpose, info.frequency_cap), todo)
        if screened.suppressed:
            await self._lifecycle.record(chunk.campaign_id, chunk.seq, screened.suppressed, tally)
        return screened

    async def _send_window(self, chunk: SendChunk, info: CampaignInfo, screened: Screened,
                           tally: Tally, channel_closed: Callable[[], bool],
                           hold: _Hold) -> Settlement:
        gate = _Gate(self, chunk, channel_closed, tally)
        cancelled = self._cache.event(chunk.campaign_id)

        async def record(outcomes: list[RecipientOutcome]) -> None:
            await self._record(chunk, outcomes, tally)
            screened.answered(outcomes)

        def stop(result: SendResult) -> None:
            if self._refusals is not None and result.error is not None:
                self._refusals.stop(chunk.campaign_id, result.error, result.message)

        fence, epoch = self._fence, hold.epoch
        await self._window.send(
            info.content.shared, screened.admitted, may_start=gate.may_start, cancelled=cancelled,
            buckets=(LiveRate(self._limits, chunk.campaign_id, info),
                     *self._limits.for_lane(info.lane)),
            record=record, stop=stop, fenced=lambda: not fence.holds(epoch), lane=info.lane)
        if gate.verdict is None and cancelled.is_set():
            if self._cache.known(chunk.campaign_id) is May.HOLD:
                return Settlement.HOLD  # paused while sending: the rest waits for the resume
            # Heard while sending: the chunk closes cancelled even if every request got its
            # answer, or it would count as done for a campaign that is being cancelled.
            tally.stopped = True
        return gate.verdict or Settlement.ACK

    async def before_request(self, chunk: SendChunk, channel_closed: Callable[[], bool],
                             started: float, tally: Tally) -> Settlement | None:
        """Whether this chunk may start another request; the verdict if it must stop here."""
        if channel_closed():
            return Settlement.ABORT
        if self._stopping or time.monotonic() - started > self._policy.budget_s:
            return Settlement.REPUBLISH
        may = await self._cache.verdict(chunk.campaign_id)
        if may is May.STOP:
            tally.stopped = True
            return Settlement.ACK
        return Settlement.HOLD if may is May.HOLD else None

    async def _record(self, chunk: SendChunk, outcomes: list[RecipientOutcome],
                      tally: Tally) -> None:
        """Write a group's outcomes; then the campaign's live counters and dead tokens (and the
        tokens of another project, once there are answers enough to tell)."""
        dead = dead_tokens(outcomes)
        if self._refusals is not None:
            dead += [(token, FcmError.SENDER_ID_MISMATCH.value) for token in
                     self._refusals.mismatched_to_retire(chunk.campaign_id, outcomes)]
        await self._lifecycle.record(chunk.campaign_id, chunk.seq, outcomes, tally, dead)


def targets(chunk: SendChunk, recorded: Recorded, content: CompiledContent,
            admits: Callable[[str], bool] = lambda _token: True
            ) -> tuple[list[Target], list[RecipientOutcome]]:
    """The chunk's recipients still to send (of those ``admits`` lets through: a staged
    rollout's open waves), and those whose message cannot be sent at all (rendered over FCM's
    size limit, or not renderable), as failed outcomes, with those the dispatcher marked
    suppressed (quiet hours that skip) as suppressed outcomes.

    A campaign whose devices all get one message (no translations, no placeholders) sends the
    shared one, its token spliced in, as before; only a per-device campaign renders here, each
    recipient's message from the profile its chunk carries."""
    todo = [(position, r) for position, r in enumerate(chunk.recipients)
            if position not in recorded and admits(r.token)]
    erased = [RecipientOutcome(Target(position, ""), ERASED) for position, r in todo
              if r.erased]
    erased += [RecipientOutcome(Target(position, r.token), suppressed_code(r.suppressed))
               for position, r in todo if r.suppressed is not None and not r.erased]
    if erased:  # never sent: recorded failed (or suppressed), so every place is counted
        todo = [(position, r) for position, r in todo if not r.erased and r.suppressed is None]
    if not content.per_device:
        return [Target(position, r.token) for position, r in todo], erased
    sendable, refused, first_failure = _rendered(todo, content)
    if refused:  # one line per chunk, however many of its recipients fail so
        log.warning("chunk %s:%d: %d recipients failed before sending (first: %s)",
                    chunk.campaign_id, chunk.seq, len(refused), first_failure)
    return sendable, erased + refused


def _rendered(todo: list[tuple[int, Recipient]], content: CompiledContent
              ) -> tuple[list[Target], list[RecipientOutcome], str | None]:
    """Each recipient's own message, or its failure (and the first failure's reason)."""
    sendable: list[Target] = []
    refused: list[RecipientOutcome] = []
    first_failure: str | None = None
    for position, recipient in todo:
        message = content.message_for(recipient.token, recipient.device())
        if message.body is not None:
            sendable.append(Target(position, recipient.token, message.body))
        else:
            refused.append(RecipientOutcome(Target(position, recipient.token), message.code))
            first_failure = first_failure or message.failure
    return sendable, refused, first_failure
class LiveRate:
    """The campaign's own rate as it is now (``PATCH`` may change it while a chunk sends, and
    ``CampaignCache.refresh`` reads it again every ``STATUS_REFRESH_S``): each ``take`` grants at
    most a tenth of a second's worth, at the rate of that moment, so a change shows at FCM within
    a refresh and a tenth of a second, and a capped campaign's requests leave evenly rather than
    in blocks. No rate: nothing to wait for, no I/O."""

    def __init__(self, limits: RateLimits, campaign_id: str, info: CampaignInfo) -> None:
        self._limits = limits
        self._campaign_id = campaign_id
        self._info = info

    async def take(self, wanted: int, stop: asyncio.Event | None = None) -> int:
        """Up to ``wanted`` tokens, at most a tenth of a second's worth (0 if ``stop`` is set
        first)."""
        rate = self._info.rate_per_s
        bucket = self._limits.for_campaign(self._campaign_id, rate)
        if bucket is None or rate is None:
            return wanted
        return await bucket.take(min(wanted, max(1, math.ceil(rate / 10))), stop)

    async def penalize(self, seconds: float) -> None:
        """FCM's push-back is the project bucket's business, not a campaign's."""


class _Gate:
    """One delivery's check before each request: the first verdict that stops it is kept."""

    def __init__(self, sender: ChunkSender, chunk: SendChunk, channel_closed: Callable[[], bool],
                 tally: Tally) -> None:
        self._sender = sender
        self._chunk = chunk
        self._channel_closed = channel_closed
        self._tally = tally
        self._started = time.monotonic()
        self.verdict: Settlement | None = None

    async def may_start(self) -> bool:
        if self.verdict is None:
            self.verdict = await self._sender.before_request(self._chunk, self._channel_closed,
                                                             self._started, self._tally)
        return self.verdict is None


def _not_taken(chunk: SendChunk, why: NotTaken) -> Settlement:
    if why is NotTaken.UNKNOWN:
        return _unexplained(chunk, f"its campaign has no chunk {chunk.seq}")
    return Settlement.BUSY if why is NotTaken.BUSY else Settlement.ACK


def _unexplained(chunk: SendChunk, why: str) -> Settlement:
    log.warning("chunk message %s:%d dead-lettered: %s", chunk.campaign_id, chunk.seq, why)
    return Settlement.UNEXPLAINED
