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
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bson import ObjectId

from herald.adapters.mongo import Document
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.api import CampaignTemplate
from herald.domain.status import Transition
from herald.domain.timing import next_occurrence, occurrences_until
from herald.observability import (
    SCHEDULE_CLAIMS,
    SCHEDULE_CLAIMS_LOST,
    SCHEDULE_LAG_SECONDS,
    SCHEDULE_MISSED,
)
from herald.service_layer.campaigns import CampaignCreator, new_campaign_document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerPolicy:
    pod_id: str
    misfire_grace_s: float
    lease_s: float


def _overdue_s(due_at: datetime, now: datetime) -> float:
    return (now - due_at).total_seconds()


class Scheduling:
    def __init__(self, stores: Stores, creator: CampaignCreator, policy: SchedulerPolicy) -> None:
        self._stores = stores
        self._creator = creator
        self._policy = policy

    async def seconds_until_due(self, now: datetime) -> float | None:
        """Time to the next due campaign or schedule run; None if nothing is scheduled."""
        candidates = [await self._stores.campaigns.next_scheduled_due(),
                      await self._stores.schedules.next_run_at()]
        due = [c for c in candidates if c is not None]
        return max(0.0, (min(due) - now).total_seconds()) if due else None

    async def fire_due_campaigns(self, now: datetime) -> int:
        """Fire (or mark missed) every one-off campaign due at or before ``now``."""
        handled = 0
        for campaign in await self._stores.campaigns.due_scheduled(now):
            grace = self._policy.misfire_grace_s
            overdue = _overdue_s(campaign["due_at"], now)
            if overdue > grace:
                handled += await self._miss_campaign(campaign, overdue, grace, now)
            else:
                handled += await self._fire_campaign(campaign, overdue, now)
        return handled

    async def _fire_campaign(self, campaign: Document, overdue: float, now: datetime) -> int:
        fired = await self._stores.campaigns.transition(
            campaign["_id"], Transition.FIRE, now,
            also_set={"fired_at": now, "fired_by": self._policy.pod_id})
        if fired is None:
            SCHEDULE_CLAIMS_LOST.inc()
            return 0
        SCHEDULE_CLAIMS.inc()
        SCHEDULE_LAG_SECONDS.observe(max(0.0, overdue))
        log.info("fired %s, due %s (%.3fs late)", fired["_id"], fired["due_at"].isoformat(), overdue)
        await self._creator.wake_dispatcher(str(fired["_id"]))
        return 1

    async def _miss_campaign(self, campaign: Document, overdue: float, grace: float,
                             now: datetime) -> int:
        reason = f"missed: found {overdue:.0f}s overdue, beyond the misfire grace of {grace:.0f}s"
        missed = await self._stores.campaigns.transition(
            campaign["_id"], Transition.MISS, now, also_set={"error": reason, "finished_at": now})
        if missed is None:
            SCHEDULE_CLAIMS_LOST.inc()
            return 0
        SCHEDULE_MISSED.inc()
        log.warning("campaign %s %s", campaign["_id"], reason)
        return 1

    async def run_due_schedules(self, now: datetime) -> int:
        """Run (or mark missed) the due occurrence of every active schedule."""
        handled = 0
        for schedule in await self._stores.schedules.due(now):
            lease_until = now + timedelta(seconds=self._policy.lease_s)
            claimed = await self._stores.schedules.claim(
                schedule["_id"], schedule["next_run_at"], self._policy.pod_id, now, lease_until)
            if claimed is None:
                SCHEDULE_CLAIMS_LOST.inc()
                continue
            await self._run_occurrences(claimed, now)
            handled += 1
        return handled

    async def _run_occurrences(self, schedule: Document, now: datetime) -> None:
        """Run the latest due occurrence if within the grace; every other one is missed."""
        cron, zone = schedule["cron"], schedule["timezone"]
        due = occurrences_until(cron, zone, schedule["next_run_at"], now)
        grace = _grace(schedule, self._policy.misfire_grace_s)
        latest = due[-1]
        runs: list[dict[str, Any]] = []
        on_time = _overdue_s(latest, now) <= grace
        missed = due[:-1] if on_time else due
        if missed:
            runs.append(_missed_run(missed, grace, now))
            SCHEDULE_MISSED.inc(len(missed))
        if on_time:
            runs.append(await self._start_run(schedule, latest, now))
        following = next_occurrence(cron, zone, max(latest, now))
        if not await self._stores.schedules.advance(schedule, self._policy.pod_id, following,
                                                    runs, len(missed), now):
            log.warning("schedule %s was changed while running; its next run is recomputed",
                        schedule["_id"])

    async def _start_run(self, schedule: Document, occurrence: datetime,
                         now: datetime) -> dict[str, Any]:
        template = CampaignTemplate.model_validate(schedule["template"])
        document = new_campaign_document(
            content={"title": template.title, "body": template.body, "data": template.data,
                     "image_url": str(template.image_url) if template.image_url else None},
            name=template.name or schedule.get("name"),
            audience=template.audience.model_dump(mode="json", by_alias=True), retarget=None,
            chunk_size=template.chunk_size, rate_per_s=template.rate_per_s, due_at=occurrence,
            now=now, source="schedule", schedule_id=str(schedule["_id"]))
        document.update(run_key=f"{schedule['_id']}:{occurrence.isoformat()}", fired_at=now,
                        fired_by=self._policy.pod_id)
        run = await self._stores.campaigns.insert_run(document)
        SCHEDULE_CLAIMS.inc()
        SCHEDULE_LAG_SECONDS.observe(max(0.0, _overdue_s(occurrence, now)))
        await self._creator.wake_dispatcher(str(run["_id"]))
        log.info("schedule %s: run %s for %s", schedule["_id"], run["_id"], occurrence.isoformat())
        return {"occurrence": occurrence, "outcome": "fired", "campaign_id": str(run["_id"]),
                "reason": None, "recorded_at": now}


def _grace(schedule: Document, default_s: float) -> float:
    own = schedule.get("misfire_grace_s")
    return default_s if own is None else float(own)


def _missed_run(missed: list[datetime], grace: float, now: datetime) -> dict[str, Any]:
    count = len(missed)
    what = "1 occurrence" if count == 1 else f"{count} occurrences up to this one"
    return {"occurrence": missed[-1], "outcome": "missed", "campaign_id": None,
            "reason": f"{what} overdue beyond the misfire grace of {grace:.0f}s (scheduler down?)",
            "recorded_at": now}


def new_schedule_document(*, name: str | None, template: dict[str, Any], cron: str,
                          timezone: str, misfire_grace_s: int | None, now: datetime) -> Document:
    return {"_id": ObjectId(), "name": name, "template": template, "cron": cron,
            "timezone": timezone, "state": "active", "misfire_grace_s": misfire_grace_s,
            "next_run_at": next_occurrence(cron, timezone, now), "claim": None, "runs": [],
            "missed_total": 0, "created_at": now, "updated_at": now}


def local_time(instant: datetime | None, timezone: str) -> str | None:
    """``instant`` on the schedule's own wall clock, for people reading the API."""
    return instant.astimezone(ZoneInfo(timezone)).isoformat() if instant else None


class ScheduleEnded(Exception):
    def __init__(self) -> None:
        super().__init__("the schedule has ended; create a new one")


async def replan(stores: Stores, schedule_id: str, changes: dict[str, Any]) -> Document | None:
    """Apply edits to a schedule, recomputing its next run from now when they affect it."""
    current = await stores.schedules.get(schedule_id)
    if current is None:
        return None
    if current["state"] == "ended":
        raise ScheduleEnded
    merged = {**current, **changes}
    now = utcnow()
    if {"cron", "timezone", "state"} & set(changes) and merged["state"] == "active":
        changes["next_run_at"] = next_occurrence(merged["cron"], merged["timezone"], now)
    updated = await stores.schedules.update(schedule_id, {**changes, "updated_at": now},
                                            where={"state": {"$ne": "ended"}})
    if updated is None:
        raise ScheduleEnded
    return updated
