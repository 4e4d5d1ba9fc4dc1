"""A staged rollout that halts itself (docs/sending-safely.md): the pure part.

A campaign may send in waves: wave k reaches a cumulative ``percent`` of the audience, then holds
for ``hold_s``. Which wave a recipient belongs to is its *wave bucket*: a keyed hash of the
campaign id and its token mapped to [0, 100). It is uniform, stable for a campaign (every pod,
every delivery, every restart computes the same one), independent of the order of the ids (the
first wave is a sample of the whole audience, not its first devices), and different from one
campaign to the next (nobody is always in the first wave).

The gate: at the end of each wave and during its hold, the failure rate of the recipients
attempted so far (every recipient recorded failed, except dead tokens, which say nothing about
the campaign; ``SENDER_ID_MISMATCH`` counts) is compared with ``failure_rate_above`` once
``min_attempts`` recipients were attempted (dead tokens are not attempts either); above it, the
campaign is paused with a reason such as "failure rate 31% > 5% after wave 1: 100 of 10,000"
(failed of attempted).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from herald.domain.fcm_errors import token_is_dead
from herald.domain.suppression import is_failure, is_suppressed

BUCKETS = 10_000
"""Resolution of a wave bucket: hundredths of a percent."""


@dataclass(frozen=True, slots=True)
class RolloutWave:
    percent: float
    """Cumulative share of the audience reached once this wave is sent, in (0, 100]."""
    hold_s: float = 0.0
    """How long to wait after the wave, with the gate watching, before the next starts."""


@dataclass(frozen=True, slots=True)
class HaltWhen:
    failure_rate_above: float
    min_attempts: int = 50


@dataclass(frozen=True, slots=True)
class Rollout:
    waves: tuple[RolloutWave, ...]
    halt_when: HaltWhen | None = None

    @property
    def last_wave(self) -> int:
        return len(self.waves) - 1


@dataclass(frozen=True, slots=True)
class GateFigures:
    """What the gate compares: failed (not dead tokens) of attempted (not dead tokens)."""

    failed: int = 0
    attempted: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failed / self.attempted if self.attempted else 0.0


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """Where a campaign's rollout is (stored on the campaign, shown by its GET)."""

    wave: int = 0
    """The wave being sent or held (0-based; shown 1-based)."""
    hold_until: datetime | None = None
    """Set once the wave is sent: the next starts then (or at a resume)."""
    figures: GateFigures = GateFigures()
    checked_at: datetime | None = None
    sent: int = 0
    failed: int = 0
    """Exact, from the records, when last checked: a rollout's chunks stay pending (and out of
    the live counts, which grow by closed chunks) until their last wave."""
    judged_since: datetime | None = None
    """Set by a resume of a campaign the gate halted (the operator's override): from then on the
    gate judges only what was recorded since, the waves after the override."""
    wave_figures: tuple[GateFigures, ...] = ()
    """The gate's figures of each wave sent so far (what was recorded while it was open)."""
    offered_wave: int = 0
    """The last wave whose kept chunks were offered to the senders (wave 0's by paging)."""


def wave_bucket(campaign_id: str, token: str) -> float:
    """The recipient's place in [0, 100): a keyed BLAKE2b of its token, the campaign id as key."""
    digest = hashlib.blake2b(token.encode(), key=campaign_id.encode()[:64], digest_size=8).digest()
    return (int.from_bytes(digest, "big") % BUCKETS) * 100 / BUCKETS


def wave_of(bucket: float, waves: Sequence[RolloutWave]) -> int:
    """The first wave whose cumulative percent covers ``bucket``."""
    for index, wave in enumerate(waves):
        if bucket < wave.percent:
            return index
    return len(waves) - 1


def in_waves_up_to(campaign_id: str, token: str, rollout: Rollout, wave: int) -> bool:
    """Whether the recipient is sent by the time wave ``wave`` is (0-based)."""
    return wave >= rollout.last_wave or \
        wave_of(wave_bucket(campaign_id, token), rollout.waves) <= wave


def sent_and_failed(errors: Iterable[str | None]) -> tuple[int, int]:
    """Recorded outcomes counted as the campaign's counts count them (a suppressed one is
    neither)."""
    sent = failed = 0
    for error in errors:
        sent += error is None
        failed += is_failure(error)
    return sent, failed


def gate_figures(errors: Iterable[str | None]) -> GateFigures:
    """The gate's figures from recorded outcomes (None: sent; else the recorded error)."""
    failed = attempted = 0
    for error in errors:
        if token_is_dead(error) or is_suppressed(error):  # suppressed: never attempted
            continue
        attempted += 1
        failed += error is not None
    return GateFigures(failed=failed, attempted=attempted)


def wave_share(cumulative: GateFigures, earlier: Iterable[GateFigures]) -> GateFigures:
    """One wave's figures: the cumulative figures at its end less the earlier waves'."""
    failed, attempted = cumulative.failed, cumulative.attempted
    for figures in earlier:
        failed -= figures.failed
        attempted -= figures.attempted
    return GateFigures(failed=max(0, failed), attempted=max(0, attempted))


def trips(figures: GateFigures, halt_when: HaltWhen | None) -> bool:
    """Whether the gate halts the campaign on these figures."""
    return (halt_when is not None and figures.attempted >= halt_when.min_attempts
            and figures.failure_rate > halt_when.failure_rate_above)


def percent(share: float) -> str:
    """A share as the reason shows it: whole percents where exact to a tenth, else one
    decimal (0.31 → "31%", 0.054 → "5.4%", 0.05 → "5%")."""
    return f"{round(share * 100, 1):g}%"


def halt_reason(figures: GateFigures, halt_when: HaltWhen, wave: int) -> str:
    """Why the gate halted after 0-based wave ``wave``, e.g.
    "failure rate 31% > 5% after wave 1: 100 of 10,000" (failed of attempted)."""
    return (f"failure rate {percent(figures.failure_rate)} > "
            f"{percent(halt_when.failure_rate_above)} after wave {wave + 1}: "
            f"{figures.failed:,} of {figures.attempted:,}")
