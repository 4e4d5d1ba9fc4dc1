"""When will it be done (issue 29, point 6): the forecast of a new campaign's last recipient
(``POST /v1/audiences/estimate``) and of a sending one's (``GET /v1/campaigns/{id}``: ``eta``).

The simulation is pure (``herald/domain/forecast.py``); this module gives it its inputs:

- *the fleet's rate*: what one live sender sends in a second as measured
  (``adapters/fleet_rate.py``), else ``ForecastSettings.default_sender_rate_per_s``, times the
  live senders, never more than the project's FCM rate; bulk never more than its share of it;
- *the load*: every campaign that sends or is about to (``pending``, ``in_progress``), with what
  it still has to send: its size less what is recorded. Its size is exact once the dispatcher
  paged it all (``targeted``); before that it is its audience counted once per api process (at
  most ``COUNTS_PER_LOAD`` new counts per reading, the others meanwhile counted as what is paged
  so far), or a follow-up's share of its original's counts. A local-time campaign counts what
  is paged now: its later waves are hours away.

The load is read at most once per ``LOAD_TTL_S`` and shared by every forecast meanwhile, so a
console typing an audience costs one read of the running campaigns a second and a simulation per
question. A simulation costs about a millisecond per hundred running campaigns, up to ~0.7 s
for a thousand capped campaigns in waves (docs/measurements.md); beside more than
``INLINE_JOBS`` campaigns it runs in a worker thread, so the api's event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.forecast import FleetRates, Job, Phase, finishes_in_s, rollout_phases
from herald.domain.lanes import Lane
from herald.domain.quiet_hours import held_until
from herald.domain.rollout import Rollout
from herald.domain.status import Status
from herald.service_layer.ports import CampaignReads, DeviceRepository, FleetMeasure, PodRegistry

SENDING = (Status.PENDING, Status.IN_PROGRESS)
"""Campaigns that share the fleet now, or will as soon as a dispatcher claims them."""
LOAD_TTL_S = 1.0
INLINE_JOBS = 100
"""Simulations beside more running campaigns than this run off the event loop."""
COUNTS_PER_LOAD = 2
"""Audiences counted for one reading of the load: on nx-27017 a count scans every device (1.7 s
at 1,000,000 devices on 2026-11-27), and the reading holds every forecast of the api meanwhile."""
NEW = "new campaign"


@dataclass(frozen=True)
class ForecastSettings:
    project_rate_per_s: float
    urgent_reserve_share: float
    default_sender_rate_per_s: float
    """What one sender is assumed to send in a second before the fleet was ever measured busy."""


@dataclass(frozen=True)
class Load:
    """The running campaigns as the forecast sees them, and the fleet's rate then."""

    jobs: tuple[Job, ...]
    fleet: FleetRates
    measured: bool
    senders: int
    at: datetime


@dataclass(frozen=True)
class Forecast:
    finishes_in_s: float | None
    """Seconds to the last recipient; None: never, as things stand (no sender alive, or
    nothing left for its lane)."""
    fleet_rate_per_s: float
    fleet_rate_measured: bool
    recipients_ahead: int
    """What the running campaigns of its lane and the lanes before it still have to send."""
    at: datetime

    @property
    def finishes_at(self) -> datetime | None:
        return None if self.finishes_in_s is None else self.at + timedelta(
            seconds=self.finishes_in_s)


def recorded(campaign: Campaign) -> int:
    """Recipients with an outcome so far (a rollout's are counted apart until its last wave)."""
    counts, rollout = campaign.counts, campaign.rollout_progress
    sent, failed = counts.sent, counts.failed
    if rollout is not None:
        sent, failed = max(sent, rollout.sent), max(failed, rollout.failed)
    return sent + failed + counts.suppressed


def known_size(campaign: Campaign) -> int | None:
    """Its recipients in all, when known without a read: paged to the end, or sent in waves
    (local time, quiet hours: what is paged now), or counted when created; None otherwise."""
    counts = campaign.counts
    if campaign.dispatch.done or campaign.local_time is not None or campaign.dispatch.waves:
        return counts.targeted
    if campaign.audience_estimate is not None and campaign.follow_up is None:
        return max(campaign.audience_estimate, counts.targeted)
    return None


def job_of(campaign: Campaign, size: int, now: datetime) -> Job | None:
    """``campaign`` as the simulation sees it: what it still has to send (of ``size`` in all),
    in waves after a hold if it has a rollout; None if it has nothing left to send."""
    done = recorded(campaign)
    rollout, progress = campaign.rollout, campaign.rollout_progress
    if rollout is None or progress is None:
        phases: tuple[Phase, ...] = (Phase(max(0, size - done)),)
        starts_in_s = 0.0
    elif progress.hold_until is not None:
        phases = rollout_phases(size, rollout.waves, wave=progress.wave + 1, recorded=done)
        starts_in_s = max(0.0, (progress.hold_until - now).total_seconds())
    else:
        phases = rollout_phases(size, rollout.waves, wave=progress.wave, recorded=done)
        starts_in_s = 0.0
    if not any(phase.recipients > 0 for phase in phases):
        return None
    return Job(campaign.id, campaign.lane, phases, campaign.rate_per_s, starts_in_s)


def new_job(devices: int, lane: Lane, rate_per_s: int | None, rollout: Rollout | None) -> Job:
    """A campaign not created yet, to ``devices``."""
    phases = rollout_phases(devices, rollout.waves) if rollout else (Phase(devices),)
    return Job(NEW, lane, phases, rate_per_s)


def fleet_rates(settings: ForecastSettings, senders: int,
                measured_per_sender: float | None) -> FleetRates:
    per_sender = measured_per_sender or settings.default_sender_rate_per_s
    return FleetRates(
        total_per_s=min(settings.project_rate_per_s, per_sender * senders),
        bulk_per_s=settings.project_rate_per_s * (1 - settings.urgent_reserve_share))


def ahead_of(job: Job, jobs: Iterable[Job]) -> int:
    return round(sum(other.recipients for other in jobs
                     if other.key != job.key and other.lane.rank <= job.lane.rank))


class Forecaster:
    """The forecasts of the api: one reading of the load a second, shared."""

    def __init__(self, campaigns: CampaignReads, devices: DeviceRepository, pods: PodRegistry,
                 measure: FleetMeasure, settings: ForecastSettings) -> None:
        self._campaigns = campaigns
        self._devices = devices
        self._pods = pods
        self._measure = measure
        self._settings = settings
        self._sizes: dict[str, int] = {}
        self._load: Load | None = None
        self._read_at = -math.inf
        self._reading = asyncio.Lock()

    async def new_campaign(self, devices: int, lane: Lane, rate_per_s: int | None,
                           rollout: Rollout | None) -> Forecast:
        """The forecast of a campaign created now to ``devices``."""
        load = await self.load()
        return await _forecast(new_job(devices, lane, rate_per_s, rollout), load)

    async def campaign(self, campaign: Campaign) -> Forecast | None:
        """The forecast of a campaign that sends (or is about to); None in any other status.
        One that quiet hours hold is not done before its last held zone is due."""
        if campaign.status not in SENDING:
            return None
        load = await self.load()
        job = job_of(campaign, await self._size(campaign, counts_left=[1]), load.at)
        held_s = _held_for_s(campaign, load.at)
        if job is None:
            return None if held_s is None else _waiting(held_s, load)
        forecast = await _forecast(job, load)
        if held_s is None or forecast.finishes_in_s is None:
            return forecast
        return replace(forecast, finishes_in_s=max(forecast.finishes_in_s, held_s))

    async def load(self) -> Load:
        """The running campaigns and the fleet's rate, read at most once per ``LOAD_TTL_S``."""
        async with self._reading:
            if self._load is None or time.monotonic() - self._read_at >= LOAD_TTL_S:
                self._load = await self._read_load()
                self._read_at = time.monotonic()
            return self._load

    async def _read_load(self) -> Load:
        now = utcnow()
        running = [c for status in SENDING for c in await self._campaigns.with_status(status)]
        running.sort(key=lambda c: (c.lane.rank, c.id))  # counted first: urgent, then oldest
        counts_left = [COUNTS_PER_LOAD]
        jobs = [job_of(c, await self._size(c, counts_left), now) for c in running]
        self._sizes = {c.id: self._sizes[c.id] for c in running if c.id in self._sizes}
        senders = len(await self._pods.live(["sender"]))
        measured = await self._measure.per_sender_per_s()
        return Load(jobs=tuple(job for job in jobs if job is not None),
                    fleet=fleet_rates(self._settings, senders, measured),
                    measured=measured is not None, senders=senders, at=now)

    async def _size(self, campaign: Campaign, counts_left: list[int]) -> int:
        """Its recipients in all: known, counted before, or counted now while ``counts_left``
        allows (else what it has paged so far)."""
        size = known_size(campaign)
        if size is not None:
            return size
        if campaign.id not in self._sizes and counts_left[0] > 0:
            counts_left[0] -= 1
            self._sizes[campaign.id] = await self._count(campaign)
        return max(self._sizes.get(campaign.id, 0), campaign.counts.targeted)

    async def _count(self, campaign: Campaign) -> int:
        follow_up = campaign.follow_up
        if follow_up is None:
            reach = campaign.reach
            return await self._devices.count(reach) if reach else 0
        original = await self._campaigns.get(follow_up.campaign_id)
        if original is None:
            return 0
        return follow_up.size_in(original.counts)


def _held_for_s(campaign: Campaign, now: datetime) -> float | None:
    """Seconds until the last zone quiet hours hold is due, if it is still to come."""
    until = held_until(campaign.dispatch.waves or ())
    return None if until is None or until <= now else (until - now).total_seconds()


def _waiting(held_s: float, load: Load) -> Forecast:
    """A campaign with nothing left to send before its held zones are due."""
    return Forecast(finishes_in_s=held_s, fleet_rate_per_s=load.fleet.total_per_s,
                    fleet_rate_measured=load.measured, recipients_ahead=0, at=load.at)


async def _forecast(job: Job, load: Load) -> Forecast:
    if len(load.jobs) > INLINE_JOBS:
        took_s = await asyncio.to_thread(finishes_in_s, job, load.jobs, load.fleet)
    else:
        took_s = finishes_in_s(job, load.jobs, load.fleet)
    return Forecast(finishes_in_s=None if math.isinf(took_s) else took_s,
                    fleet_rate_per_s=load.fleet.total_per_s, fleet_rate_measured=load.measured,
                    recipients_ahead=ahead_of(job, load.jobs), at=utcnow())

