"""When will it be done: the time to a campaign's last recipient, forecast (issue 29, point 6).

The fleet sends at a rate it can measure (``FleetRates.total_per_s``: what the senders achieve
together, never more than the project's FCM rate). Campaigns that send at once share it the way
Herald's queues and senders share it (``herald/domain/lanes.py``):

- lanes in strict order: ``urgent`` takes what it can use, ``standard`` what urgent leaves,
  ``bulk`` what both leave and never more than its share of the project's rate
  (``FleetRates.bulk_per_s``: ``1 - HERALD_URGENT_RESERVE_SHARE`` of it);
- within a lane, max-min fair ("water-filling"): a capped campaign whose cap is below an equal
  share gets its cap, the others split the rest equally (each uncapped campaign has the same
  bounded number of chunks on offer, so the senders take them in turn);
- a staged rollout sends a wave, then holds (it takes no share while it holds), then the next.

``finish_times`` simulates this event by event: between two events (a campaign ends a wave or
its last wave, a hold ends) every rate is constant, so the next event is found exactly and the
cost is bounded by the number of waves of the campaigns simulated, times the work of one
water-filling (linear in the campaigns of a lane), with no time step. A campaign's forecast
needs only the campaigns of its lane and the lanes before it (``finishes_in_s``): lower lanes
never slow it.

What it leaves out (docs/http-api.md says so): the time before a campaign's first request, chunks
a sender has half sent (the live counts grow by whole chunks), FCM's push-back, and campaigns
not yet due.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from herald.domain.lanes import LANES_FIRST_TO_LAST, Lane
from herald.domain.rollout import RolloutWave

DONE_EPSILON = 1e-6
"""Recipients left below this are none (the simulation works in fractions of recipients)."""
TIME_EPSILON_S = 1e-9


@dataclass(frozen=True, slots=True)
class Phase:
    """Recipients sent at once, then a hold (a rollout's wave; a campaign without waves has
    one phase and no hold)."""

    recipients: float
    hold_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Job:
    """A campaign as the forecast sees it: what it still has to send, in its lane, under its cap."""

    key: str
    lane: Lane
    phases: tuple[Phase, ...]
    rate_per_s: float | None = None
    """Its own cap; None: as fast as its share allows."""
    starts_in_s: float = 0.0
    """When it may send again (a hold that ends later); 0: now."""

    @property
    def recipients(self) -> float:
        return sum(phase.recipients for phase in self.phases)


@dataclass(frozen=True, slots=True)
class FleetRates:
    total_per_s: float
    """What every sender together sends in a second (measured, else a default), at most the
    project's FCM rate."""
    bulk_per_s: float
    """The most the ``bulk`` lane may take: ``1 - HERALD_URGENT_RESERVE_SHARE`` of the
    project's FCM rate."""

    def for_lane(self, lane: Lane, left_per_s: float) -> float:
        """What ``lane`` may take when the lanes before it left ``left_per_s``."""
        return min(left_per_s, self.bulk_per_s) if lane is Lane.BULK else left_per_s


def rollout_phases(recipients: float, waves: Sequence[RolloutWave], *, wave: int = 0,
                   recorded: float = 0.0) -> tuple[Phase, ...]:
    """The phases of ``recipients`` sent in ``waves`` (cumulative percents), from wave index
    ``wave`` on, ``recorded`` of them already sent (or failed). The last wave's hold holds
    nothing: the campaign is done when its last recipient is."""
    phases = []
    reached = max(0.0, recorded)
    last = len(waves) - 1
    for index in range(wave, len(waves)):
        upto = recipients * waves[index].percent / 100
        phases.append(Phase(max(0.0, upto - reached), waves[index].hold_s if index < last else 0))
        reached = max(reached, upto)
    return tuple(phases)


def water_fill(capacity_per_s: float, caps: Sequence[float | None]) -> list[float]:
    """Max-min fair shares of ``capacity_per_s``, ``caps`` in increasing order (None, no cap,
    last): each gets the lesser of its cap and an equal share of what the smaller ones left."""
    rates = []
    left, waiting = max(0.0, capacity_per_s), len(caps)
    for cap in caps:
        fair = left / waiting
        rate = fair if cap is None or cap > fair else cap
        rates.append(rate)
        left, waiting = left - rate, waiting - 1
    return rates


class _Run:
    """One job while it is simulated: the phase it is in, what it has left of it, when it
    may send (after a hold), when it was done."""

    __slots__ = ("done_at", "job", "left", "phase", "ready_at")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.phase = -1
        self.left = 0.0
        self.ready_at = max(0.0, job.starts_in_s)
        self.done_at: float | None = None
        self.advance(self.ready_at, hold_s=0.0)

    def advance(self, now: float, hold_s: float) -> None:
        """Its current phase was sent at ``now`` and holds ``hold_s``: on to the next phase
        that has recipients, after that hold and those of the empty phases between; done at
        ``now`` if none has (its last recipient was sent then, whatever holds follow)."""
        phases = self.job.phases
        following = range(self.phase + 1, len(phases))
        upcoming = next((i for i in following if phases[i].recipients > DONE_EPSILON), None)
        if upcoming is None:
            self.done_at = now
            return
        skipped_s = sum(phases[i].hold_s for i in range(self.phase + 1, upcoming))
        self.phase, self.left = upcoming, phases[upcoming].recipients
        self.ready_at = now + hold_s + skipped_s


def _cap_order(run: _Run) -> tuple[int, float]:
    cap = run.job.rate_per_s
    return run.job.lane.rank, math.inf if cap is None else cap


def _rates(sending: list[_Run], fleet: FleetRates) -> list[float]:
    """Each sending run's rate now: lanes in order, water-filling within a lane (``sending``
    is sorted by lane, then cap)."""
    rates: list[float] = []
    left = fleet.total_per_s
    start = 0
    for lane in LANES_FIRST_TO_LAST:
        end = start
        while end < len(sending) and sending[end].job.lane is lane:
            end += 1
        caps = [run.job.rate_per_s for run in sending[start:end]]
        shares = water_fill(fleet.for_lane(lane, left), caps)
        rates.extend(shares)
        left = max(0.0, left - sum(shares))
        start = end
    return rates


def finish_times(jobs: Iterable[Job], fleet: FleetRates, *, until: str | None = None
                 ) -> dict[str, float]:
    """Seconds from now to the last recipient of each job, as they share ``fleet``
    (``math.inf`` for one that never finishes: nothing left for its lane). With ``until``,
    the simulation stops once that job is done (the others' times then are those known)."""
    runs = sorted((_Run(job) for job in jobs), key=_cap_order)
    target = next((run for run in runs if run.job.key == until), None)
    pending = [run for run in runs if run.done_at is None]
    now, steps = 0.0, 0
    budget = 4 * sum(len(run.job.phases) + 1 for run in runs) + 8  # events are at most 2 per phase
    while pending and steps < budget and (target is None or target.done_at is None):
        steps += 1
        sending = [run for run in pending if run.ready_at <= now + TIME_EPSILON_S]
        rates = _rates(sending, fleet)
        step_s = _next_event_s(now, pending, sending, rates)
        if math.isinf(step_s):
            break
        now += step_s
        for run, rate in zip(sending, rates, strict=True):
            run.left -= rate * step_s
            if run.left <= DONE_EPSILON:
                run.advance(now, run.job.phases[run.phase].hold_s)
        pending = [run for run in pending if run.done_at is None]
    return {run.job.key: math.inf if run.done_at is None else run.done_at for run in runs}


def _next_event_s(now: float, pending: list[_Run], sending: list[_Run],
                  rates: list[float]) -> float:
    """Seconds to the next event: a sending run ends its phase, or a hold ends."""
    ends = [run.left / rate for run, rate in zip(sending, rates, strict=True) if rate > 0]
    holds = [run.ready_at - now for run in pending if run.ready_at > now + TIME_EPSILON_S]
    return min(ends + holds, default=math.inf)


def finishes_in_s(job: Job, running: Iterable[Job], fleet: FleetRates) -> float:
    """Seconds from now to ``job``'s last recipient beside ``running`` (a campaign's own
    entry among them is ignored): only the campaigns of its lane and the lanes before it count."""
    ahead = [other for other in running
             if other.key != job.key and other.lane.rank <= job.lane.rank]
    return finish_times([*ahead, job], fleet, until=job.key)[job.key]
