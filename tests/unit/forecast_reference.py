"""The forecast's simulation written the plain way, as the oracle of the fast one
(herald/domain/forecast.py): every event recomputes every campaign's rate from scratch and
advances every campaign, so it is short enough to check by reading, and costs O(campaigns) per
event where the fast one costs O(capped campaigns + log campaigns)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from herald.domain.forecast import DONE_EPSILON, TIME_EPSILON_S, FleetRates, Job, water_fill
from herald.domain.lanes import LANES_FIRST_TO_LAST


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


def reference_finish_times(jobs: Iterable[Job], fleet: FleetRates, *, until: str | None = None
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


