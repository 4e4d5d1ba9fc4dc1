"""Firing what is due, to the second, with any number of scheduler replicas and no duplicates.

Seed 002's scheduler matched "the current minute" once a minute, so a minute it skipped was
never sent. Here every claim is "due at or before now": nothing due is ever skipped, whatever
the scheduler was doing. What is overdue beyond the misfire grace is marked ``missed``, with the
reason, instead of being sent late.

- One-off campaigns: the claim *is* the hand-over, a single conditional write
  ``scheduled → pending`` (recording which replica fired it); from ``pending`` any dispatcher
  takes it, announced or found by its sweep, so nothing can be lost in between.
- Schedules: a replica claims the due occurrence with a lease, inserts the run (its
  ``run_key`` is unique, so a retry inserts nothing twice), then advances the schedule. If it
  dies in between, the lease expires and another replica finishes the job.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from herald.clock import utcnow
from herald.contracts.http import LEGACY_TEMPLATE, CampaignTemplate, ScheduleCreate
from herald.domain.access import Actor
from herald.domain.approval import with_person
from herald.domain.documents import Campaign, Schedule, ScheduleRunRecord, ScheduleState, new_id
from herald.domain.purpose import Purpose
from herald.domain.status import Status
from herald.domain.timing import next_occurrence, occurrences_until
from herald.observability import (
    SCHEDULE_CLAIMS,
    SCHEDULE_CLAIMS_LOST,
    SCHEDULE_LAG_SECONDS,
    SCHEDULE_MISSED,
)
from herald.service_layer.campaigns import (
    CampaignCreator,
    content_of,
    new_campaign,
    quiet_hours_of,
)
from herald.service_layer.ports import ScheduledCampaigns, ScheduleRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerPolicy:
    pod_id: str
    misfire_grace_s: float
    lease_s: float


def _overdue_s(due_at: datetime, now: datetime) -> float:
    return (now - due_at).total_seconds()


class Scheduling:
    def __init__(self, campaigns: ScheduledCampaigns, schedules: ScheduleRepository,
                 creator: CampaignCreator, policy: SchedulerPolicy) -> None:
        self._campaigns = campaigns
        self._schedules = schedules
        self._creator = creator
        self._policy = policy

    async def seconds_until_due(self, now: datetime) -> float | None:
        """Time to the next due campaign or schedule run; None if nothing is scheduled."""
        candidates = [await self._campaigns.next_scheduled_due(),
                      await self._schedules.next_run_at()]
        due = [c for c in candidates if c is not None]
        return max(0.0, (min(due) - now).total_seconds()) if due else None

    async def fire_due_campaigns(self, now: datetime) -> int:
        """Fire (or mark missed) every one-off campaign due at or before ``now``."""
        handled = 0
        for campaign in await self._campaigns.due_scheduled(now):
            grace_s = self._policy.misfire_grace_s
            overdue_s = _overdue_s(campaign.due_at, now)
            if overdue_s > grace_s:
                handled += await self._miss_campaign(campaign, overdue_s, grace_s, now)
            else:
                handled += await self._fire_campaign(campaign, overdue_s, now)
        return handled

    async def _fire_campaign(self, campaign: Campaign, overdue_s: float, now: datetime) -> int:
        held = await self._held_at_its_time(campaign, now)
        if held is not None:
            return held
        fired = await self._campaigns.fire(campaign.id, now, self._policy.pod_id,
                                           due_at=campaign.due_at)
        if fired is None:
            SCHEDULE_CLAIMS_LOST.inc()
            return 0
        SCHEDULE_CLAIMS.inc()
        SCHEDULE_LAG_SECONDS.observe(max(0.0, overdue_s))
        log.info("fired %s, due %s (%.3fs late)", fired.id, fired.due_at.isoformat(), overdue_s)
        await self._creator.wake_dispatcher(fired.id)
        return 1

    async def _held_at_its_time(self, campaign: Campaign, now: datetime) -> int | None:
        """If ``campaign``, its audience counted again now, needs an approval it does not
        have, it waits ``awaiting_approval`` instead of firing: 1 (0 if it was changed
        meanwhile; the next round reads it again). None: it needs none, fire it."""
        gate = self._creator.approvals
        size = await gate.unapproved_size_at_its_time(campaign) if gate else None
        if size is None:
            return None
        held = await self._campaigns.hold_for_approval(campaign.id, size, now,
                                                       due_at=campaign.due_at)
        if held is None:
            SCHEDULE_CLAIMS_LOST.inc()
            return 0
        log.info("campaign %s reaches %d devices at its time: held for approval", campaign.id,
                 size)
        return 1

    async def _miss_campaign(self, campaign: Campaign, overdue_s: float, grace_s: float,
                             now: datetime) -> int:
        reason = (f"missed: found {overdue_s:.0f}s overdue, beyond the misfire grace of "
                  f"{grace_s:.0f}s")
        missed = await self._campaigns.miss(campaign.id, reason, now, due_at=campaign.due_at)
        if missed is None:
            SCHEDULE_CLAIMS_LOST.inc()
            return 0
        SCHEDULE_MISSED.inc()
        log.warning("campaign %s %s", campaign.id, reason)
        return 1

    async def run_due_schedules(self, now: datetime) -> int:
        """Run (or mark missed) the due occurrence of every active schedule."""
        handled = 0
        for schedule in await self._schedules.due(now):
            assert schedule.next_run_at is not None
            lease_until = now + timedelta(seconds=self._policy.lease_s)
            claimed = await self._schedules.claim(
                schedule.id, schedule.next_run_at, self._policy.pod_id, now, lease_until)
            if claimed is None:
                SCHEDULE_CLAIMS_LOST.inc()
                continue
            await self._run_occurrences(claimed, now)
            handled += 1
        return handled

    async def _run_occurrences(self, schedule: Schedule, now: datetime) -> None:
        """Run the latest due occurrence if within the grace; every other one is missed."""
        assert schedule.next_run_at is not None
        due = occurrences_until(schedule.cron, schedule.timezone, schedule.next_run_at, now)
        grace_s = _grace_s(schedule, self._policy.misfire_grace_s)
        latest = due[-1]
        runs: list[ScheduleRunRecord] = []
        # A run a replica created before dying went out, however late this replica is.
        started = await self._campaigns.find_run(run_key(schedule, latest))
        on_time = started is not None or _overdue_s(latest, now) <= grace_s
        missed = due[:-1] if on_time else due
        if missed:
            runs.append(_missed_run(missed, grace_s, now))
            SCHEDULE_MISSED.inc(len(missed))
        if started is not None:  # the dispatchers' sweep claims it if it was never announced
            runs.append(_fired_run(latest, started.id, now))
        elif on_time:
            runs.append(await self._start_run(schedule, latest, now))
        following = next_occurrence(schedule.cron, schedule.timezone, max(latest, now))
        if not await self._schedules.advance(schedule, self._policy.pod_id, following,
                                                    runs, len(missed), now):
            log.warning("schedule %s was changed while running; its next run is recomputed",
                        schedule.id)

    async def _start_run(self, schedule: Schedule, occurrence: datetime,
                         now: datetime) -> ScheduleRunRecord:
        template = stored_template(schedule.template)
        fresh = new_campaign(
            content=content_of(template), name=template.name or schedule.name,
            audience=template.audience, follow_up=None, chunk_size=template.chunk_size,
            rate_per_s=template.rate_per_s, due_at=occurrence, now=now, source="schedule",
            schedule_id=schedule.id, run_key=run_key(schedule, occurrence),
            created_by=schedule.created_by, lane=template.lane,
            purpose=template_purpose(schedule.template),
            frequency_cap=template.frequency_cap if schedule.template.get("purpose") else None,
            quiet_hours=quiet_hours_of(template.quiet_hours, template.purpose, schedule.timezone)
            if schedule.template.get("purpose") else None)
        # A large run (its audience counted now) waits, awaiting_approval, for a person other
        # than the schedule's creator and whoever wrote its template.
        held = await self._creator.held_if_large(
            replace(fresh, editors=schedule.template_authors))
        run = await self._campaigns.insert_run(
            replace(held, fired_at=now, fired_by=self._policy.pod_id))
        SCHEDULE_CLAIMS.inc()
        SCHEDULE_LAG_SECONDS.observe(max(0.0, _overdue_s(occurrence, now)))
        if run.status is not Status.AWAITING_APPROVAL:
            await self._creator.wake_dispatcher(run.id)
        log.info("schedule %s: run %s for %s", schedule.id, run.id, occurrence.isoformat())
        return _fired_run(occurrence, run.id, now)


def run_key(schedule: Schedule, occurrence: datetime) -> str:
    """The unique key of a schedule's run for one occurrence: a retry creates nothing twice."""
    return f"{schedule.id}:{occurrence.isoformat()}"


def _grace_s(schedule: Schedule, default_s: float) -> float:
    return default_s if schedule.misfire_grace_s is None else float(schedule.misfire_grace_s)


def _fired_run(occurrence: datetime, campaign_id: str, now: datetime) -> ScheduleRunRecord:
    return ScheduleRunRecord(occurrence=occurrence, outcome="fired", campaign_id=campaign_id,
                       reason=None, recorded_at=now)


def _missed_run(missed: list[datetime], grace_s: float, now: datetime) -> ScheduleRunRecord:
    count = len(missed)
    what = "1 occurrence" if count == 1 else f"{count} occurrences up to this one"
    return ScheduleRunRecord(
        occurrence=missed[-1], outcome="missed", campaign_id=None, recorded_at=now,
        reason=f"{what} overdue beyond the misfire grace of {grace_s:.0f}s (scheduler down?)")


def new_schedule(request: ScheduleCreate, now: datetime, by: Actor | None = None) -> Schedule:
    return Schedule(
        id=new_id(), name=request.name,
        template=request.template.model_dump(mode="json", by_alias=True), cron=request.cron,
        timezone=request.timezone, state=ScheduleState.ACTIVE,
        misfire_grace_s=request.misfire_grace_s,
        next_run_at=next_occurrence(request.cron, request.timezone, now),
        created_at=now, updated_at=now, created_by=by)


def local_time(instant: datetime | None, timezone: str) -> str | None:
    """``instant`` on the schedule's own wall clock, for people reading the API."""
    return instant.astimezone(ZoneInfo(timezone)).isoformat() if instant else None


class ScheduleEnded(Exception):
    def __init__(self) -> None:
        super().__init__("the schedule has ended; create a new one")


async def create_schedule(schedules: ScheduleRepository, request: ScheduleCreate, by: Actor) -> Schedule:
    schedule = new_schedule(request, utcnow(), by)
    await schedules.insert(schedule)
    return schedule


async def replan(schedules: ScheduleRepository, schedule_id: str, changes: dict[str, Any],
                 by: Actor) -> Schedule | None:
    """Apply edits to a schedule, recomputing its next run from now when they affect it."""
    current = await schedules.get(schedule_id)
    if current is None:
        return None
    if current.state is ScheduleState.ENDED:
        raise ScheduleEnded
    cron = changes.get("cron", current.cron)
    timezone = changes.get("timezone", current.timezone)
    state = changes.get("state", current.state)
    now = utcnow()
    if "template" in changes:  # its author may not approve its runs, like its creator
        changes["template_authors"] = [
            asdict(author) for author in with_person(current.template_authors, by)]
    if {"cron", "timezone", "state"} & set(changes) and state == ScheduleState.ACTIVE:
        changes["next_run_at"] = next_occurrence(cron, timezone, now)
    updated = await schedules.update(
        schedule_id, {**changes, "updated_at": now, "updated_by": asdict(by)}, unless_ended=True)
    if updated is None:
        raise ScheduleEnded
    return updated


async def end_schedule(schedules: ScheduleRepository, schedule_id: str, by: Actor) -> Schedule | None:
    """No further runs; past runs stay as they are. None if there is no such schedule."""
    return await schedules.update(
        schedule_id, {"state": ScheduleState.ENDED.value, "next_run_at": None,
                      "updated_at": utcnow(), "updated_by": asdict(by)})


def template_purpose(template: dict[str, Any]) -> Purpose | None:
    """The purpose a schedule's runs take: the template's (None for a template stored before
    purposes existed: its runs reach what its audience says, as they did)."""
    stored = template.get("purpose")
    return None if stored is None else Purpose(stored)


def stored_template(template: dict[str, Any]) -> CampaignTemplate:
    """A schedule's template as stored, validated; one stored before purposes existed is read
    with its audience as is (``LEGACY_TEMPLATE``), never refused for what it always did."""
    legacy = template.get("purpose") is None
    return CampaignTemplate.model_validate(template, context={LEGACY_TEMPLATE: legacy})
