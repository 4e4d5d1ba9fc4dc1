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
its last wave, a hold ends) every rate is constant, so the next event is found exactly, with no
time step. There are at most two events per wave of the campaigns simulated; each costs a pass
over the *capped* campaigns sending (their rates differ) and a heap operation for the uncapped
ones (they all get their lane's one rate, so they are kept by when they will be done in the
lane's virtual service: ``_Lane``). A campaign's forecast needs only the campaigns of its lane
and the lanes before it (``finishes_in_s``): lower lanes never slow it.
tests/unit/forecast_reference.py is the same model written the plain way, the oracle of this one.

What it leaves out (docs/http-api.md says so): the time before a campaign's first request, chunks
a sender has half sent (the live counts grow by whole chunks), FCM's push-back, and campaigns
not yet due.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
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

    @property
    def cap(self) -> float:
        return math.inf if self.job.rate_per_s is None else self.job.rate_per_s


class _Lane:
    """The campaigns of one lane sending now. Capped ones are kept in order of cap and advanced
    one by one; uncapped ones all get the same rate (the lane's ``level``), so they are kept in
    a heap by the amount of the lane's *virtual service* (what each uncapped campaign has been
    given since the simulation began) at which they will be done: the next to finish is the
    heap's top, and the whole lot advances by adding to one number."""

    __slots__ = ("capped", "level", "rates", "uncapped", "virtual")

    def __init__(self) -> None:
        self.capped: list[_Run] = []
        self.rates: list[float] = []
        self.uncapped: list[tuple[float, int, _Run]] = []
        self.virtual = 0.0
        self.level = 0.0

    def share(self, capacity_per_s: float) -> float:
        """Water-fill ``capacity_per_s`` (``water_fill``, with the uncapped campaigns last);
        what the lane takes."""
        left, waiting = max(0.0, capacity_per_s), len(self.capped) + len(self.uncapped)
        self.rates = []
        for run in self.capped:
            fair = left / waiting
            rate = min(run.cap, fair)
            self.rates.append(rate)
            left, waiting = left - rate, waiting - 1
        self.level = left / waiting if waiting else 0.0
        return sum(self.rates) + self.level * len(self.uncapped)

    def next_end_s(self) -> float:
        ends = [run.left / rate for run, rate in zip(self.capped, self.rates, strict=True)
                if rate > 0]
        if self.uncapped and self.level > 0:
            ends.append((self.uncapped[0][0] - self.virtual) / self.level)
        return min(ends, default=math.inf)

    def progress(self, step_s: float) -> list[_Run]:
        """Advance by ``step_s``; the runs whose phase is now sent (taken out of the lane)."""
        self.virtual += self.level * step_s
        sent = []
        for run, rate in zip(self.capped, self.rates, strict=True):
            run.left -= rate * step_s
        if any(run.left <= DONE_EPSILON for run in self.capped):
            sent = [run for run in self.capped if run.left <= DONE_EPSILON]
            self.capped = [run for run in self.capped if run.left > DONE_EPSILON]
        while self.uncapped and self.uncapped[0][0] - self.virtual <= DONE_EPSILON:
            sent.append(heapq.heappop(self.uncapped)[2])
        return sent


class _Simulation:
    """The fleet shared event by event: each event (a phase sent, a hold over) costs the
    capped campaigns of the lanes and a heap operation, not a pass over every campaign."""

    def __init__(self, jobs: Iterable[Job], fleet: FleetRates) -> None:
        self.fleet = fleet
        self.lanes = {lane: _Lane() for lane in LANES_FIRST_TO_LAST}
        self.waiting: list[tuple[float, int, _Run]] = []
        self.order = itertools.count()
        self.now = 0.0
        self.runs = [_Run(job) for job in jobs]
        for run in self.runs:
            if run.done_at is None:
                self._queue(run)

    def _queue(self, run: _Run) -> None:
        if run.ready_at > self.now + TIME_EPSILON_S:
            heapq.heappush(self.waiting, (run.ready_at, next(self.order), run))
            return
        lane = self.lanes[run.job.lane]
        if run.job.rate_per_s is None:
            heapq.heappush(lane.uncapped, (lane.virtual + run.left, next(self.order), run))
        else:
            bisect.insort(lane.capped, run, key=lambda other: other.cap)

    def step(self) -> bool:
        """On to the next event; False when there is none (nothing left can send)."""
        left = self.fleet.total_per_s
        for lane, state in self.lanes.items():
            left = max(0.0, left - state.share(self.fleet.for_lane(lane, left)))
        step_s = min([state.next_end_s() for state in self.lanes.values()]
                     + ([self.waiting[0][0] - self.now] if self.waiting else []))
        if math.isinf(step_s):
            return False
        self.now += step_s
        for state in self.lanes.values():
            for run in state.progress(step_s):
                run.advance(self.now, run.job.phases[run.phase].hold_s)
                if run.done_at is None:
                    self._queue(run)
        while self.waiting and self.waiting[0][0] <= self.now + TIME_EPSILON_S:
            self._queue(heapq.heappop(self.waiting)[2])
        return True


def finish_times(jobs: Iterable[Job], fleet: FleetRates, *, until: str | None = None
                 ) -> dict[str, float]:
    """Seconds from now to the last recipient of each job, as they share ``fleet``
    (``math.inf`` for one that never finishes: nothing left for its lane). With ``until``,
    the simulation stops once that job is done (the others' times then are those known)."""
    simulation = _Simulation(jobs, fleet)
    runs = simulation.runs
    target = next((run for run in runs if run.job.key == until), None)
    budget = 4 * sum(len(run.job.phases) + 1 for run in runs) + 8  # events are at most 2 per phase
    for _ in range(budget):
        if (target is not None and target.done_at is not None) or not simulation.step():
            break
    return {run.job.key: math.inf if run.done_at is None else run.done_at for run in runs}


def finishes_in_s(job: Job, running: Iterable[Job], fleet: FleetRates) -> float:
    """Seconds from now to ``job``'s last recipient beside ``running`` (a campaign's own
    entry among them is ignored): only the campaigns of its lane and the lanes before it count."""
    ahead = [other for other in running
             if other.key != job.key and other.lane.rank <= job.lane.rank]
    return finish_times([*ahead, job], fleet, until=job.key)[job.key]
