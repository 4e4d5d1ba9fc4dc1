"""How a chunk's story ends, whoever ends it (a sender, or the dead-letter handler): tally what
was recorded before, record each batch's outcomes, close the chunk once, and count it towards
its campaign (which may complete the campaign).

Outcomes are recorded before the chunk message is acknowledged, so a sender that dies loses
nothing: RabbitMQ redelivers the chunk, and the next one resumes from the records.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from herald.clock import utcnow
from herald.domain.documents import (
    CHUNK_CLOSED_FOR_GOOD,
    Campaign,
    ChunkStatus,
    Outcome,
    Recorded,
)
from herald.domain.lanes import Lane
from herald.domain.outcomes import RecipientOutcome
from herald.domain.suppression import is_suppressed, suppressed_by
from herald.observability import CHUNKS, MESSAGES, SUPPRESSED
from herald.service_layer.ports import Stores

log = logging.getLogger(__name__)


@dataclass
class Tally:
    """A chunk's outcomes so far: what earlier deliveries recorded plus what this one did."""

    sent: int = 0
    failed: int = 0
    suppressed: int = 0
    recorded_now: int = 0
    """Outcomes this delivery recorded (the rest came from earlier deliveries)."""
    stopped: bool = False
    """A cancel cut the chunk short: recipients without an outcome stay unsent."""
    lane: Lane = Lane.STANDARD
    """Its campaign's lane (the ``lane`` label of what it records)."""

    @classmethod
    def of(cls, recorded: Recorded) -> Tally:
        tally = cls()
        tally._count(recorded.values())
        return tally

    def add(self, outcomes: Sequence[RecipientOutcome]) -> None:
        self._count(o.code for o in outcomes)
        self.recorded_now += len(outcomes)

    def _count(self, codes: Iterable[str | None]) -> None:
        for code in codes:
            if code is None:
                self.sent += 1
            elif is_suppressed(code):
                self.suppressed += 1
            else:
                self.failed += 1

    @property
    def done(self) -> int:
        """Recipients with an outcome: sent, failed or suppressed."""
        return self.sent + self.failed + self.suppressed

    @property
    def status(self) -> ChunkStatus:
        """How the chunk closes: cut short by a cancel, or done."""
        return ChunkStatus.CANCELLED if self.stopped else ChunkStatus.DONE


Settled = Callable[[Campaign], Awaitable[Campaign | None]]
"""The settler's ``settled``: where a closed chunk's campaign is reported."""


async def _no_settler(_campaign: Campaign) -> Campaign | None:
    return None


class ChunkLifecycle:
    def __init__(self, stores: Stores, pod_id: str,
                 clock: Callable[[], datetime] = utcnow, *, settled: Settled = _no_settler) -> None:
        self._stores = stores
        self._pod_id = pod_id
        self._clock = clock
        self._settled = settled

    async def recorded(self, campaign_id: str, seq: int) -> Recorded:
        """What earlier deliveries of the chunk recorded (they crashed, were cut off, or
        handed the rest on)."""
        return await self._stores.deliveries.recorded(campaign_id, seq)

    async def record(self, campaign_id: str, seq: int, outcomes: Sequence[RecipientOutcome],
                     tally: Tally, dead_tokens: Sequence[tuple[str, str]] = ()) -> None:
        """Write a batch's outcomes, then retire the tokens FCM said are dead
        (``(token, error)`` pairs)."""
        if not outcomes:
            return
        now = self._clock()
        await self._stores.deliveries.record(campaign_id, seq, self._pod_id, outcomes, now)
        tally.add(outcomes)
        for error in sorted({error for _, error in dead_tokens}):
            tokens = [token for token, dead in dead_tokens if dead == error]
            await self._stores.devices.mark_invalid(tokens, error, now)
        count_outcomes((o.code for o in outcomes), tally.lane)

    async def close(self, campaign_id: str, seq: int, status: ChunkStatus, tally: Tally) -> bool:
        """Close the chunk this pod holds and count it towards its campaign, then report the
        campaign to the settler (it may have been the last chunk); False if it was closed
        already. A chunk a cancel cut short counts its outcomes but finishes nothing."""
        closed = await self._stores.chunks.finish(campaign_id, seq, status, tally.sent,
                                                  tally.failed, self._clock(), owner=self._pod_id,
                                                  suppressed=tally.suppressed)
        if closed:
            CHUNKS.labels(status.value).inc()
            done = status in CHUNK_CLOSED_FOR_GOOD
            campaign = await self._stores.campaigns.count_finished_chunk(
                campaign_id, tally.sent, tally.failed, done=done, suppressed=tally.suppressed)
            if done and campaign is not None:
                await self._settled(campaign)
        return closed


    async def wave_sent(self, campaign_id: str, seq: int, wave: int) -> None:
        """Every recipient of the chunk in a staged rollout's waves up to ``wave`` has an
        outcome: the rollout's driver counts the wave as sent once every chunk says so."""
        await self._stores.chunks.mark_wave_sent(campaign_id, seq, wave)

def count_outcomes(errors: Iterable[str | None], lane: Lane = Lane.STANDARD) -> None:
    """Add recorded outcomes to ``herald_messages_total{outcome, error, lane}``, and those
    suppressed to ``herald_recipients_suppressed_total{rule}`` (no message was sent)."""
    for error, n in Counter(errors).items():
        rule = suppressed_by(error)
        if rule is not None:
            SUPPRESSED.labels(rule.value).inc(n)
            continue
        outcome = Outcome.SENT if error is None else Outcome.FAILED
        MESSAGES.labels(outcome.value, error or "", lane.value).inc(n)
