"""Firing due work with several scheduler replicas, on the real stores and broker."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from faststream.rabbit import RabbitBroker

from herald import names
from herald.adapters import rabbit
from herald.adapters.mongo import Database
from herald.adapters.records import from_bson
from herald.clock import utcnow
from herald.contracts.http import CampaignPatch, ScheduleCreate
from herald.domain.access import Role
from herald.domain.documents import Campaign, Schedule, ScheduleState
from herald.domain.status import Status
from herald.service_layer.campaigns import CampaignCreator, edit_scheduled
from herald.service_layer.ports import Stores
from herald.service_layer.scheduling import SchedulerPolicy, Scheduling, new_schedule
from tests.factories import ACTOR, insert
from tests.support import eventually

TEMPLATE = {"title": "Weekly digest", "body": "Your week", "data": {}, "name": "digest"}


def replicas(stores: Stores, broker: RabbitBroker, count: int, grace_s: float = 60.0,
             lease_s: float = 5.0) -> list[Scheduling]:
    creator = CampaignCreator(stores.campaigns, stores.idempotency, rabbit.RabbitBus(broker))
    return [Scheduling(stores.campaigns, stores.schedules, creator,
                       SchedulerPolicy(f"scheduler-{i}", grace_s, lease_s)) for i in range(count)]


async def schedule_due(stores: Stores, overdue_s: float, cron: str = "*/5 * * * *",
                       **fields: Any) -> Schedule:
    request = ScheduleCreate.model_validate(
        {"name": "s", "template": TEMPLATE, "cron": cron, "timezone": "UTC"})
    schedule = replace(new_schedule(request, utcnow()),
                       next_run_at=fields.pop("next_run_at", None)
                       or utcnow() - timedelta(seconds=overdue_s), **fields)
    await stores.schedules.insert(schedule)
    return schedule


async def runs_of(db: Database, schedule_id: str) -> list[Campaign]:
    """Every campaign the schedule started (read past the stores: no store lists them)."""
    found = db[names.CAMPAIGNS].find({"schedule_id": schedule_id})
    return [from_bson(Campaign, document) async for document in found]


async def test_three_replicas_fire_a_due_campaign_exactly_once(stores: Stores,
                                                               broker: RabbitBroker) -> None:
    campaign_ids = [await insert(stores, status=Status.SCHEDULED, due_in_s=-0.2)
                    for _ in range(10)]
    now = utcnow()
    fired = await asyncio.gather(*(r.fire_due_campaigns(now) for r in replicas(stores, broker, 3)))
    assert sum(fired) == 10
    for campaign_id in campaign_ids:
        stored = await stores.campaigns.get(campaign_id)
        assert stored is not None
        assert stored.status is Status.PENDING
        assert stored.fired_by is not None and stored.fired_by.startswith("scheduler-")


async def test_a_campaign_overdue_beyond_the_grace_is_missed_with_a_reason(
        stores: Stores, broker: RabbitBroker) -> None:
    late = await insert(stores, status=Status.SCHEDULED, due_in_s=-120)
    on_time = await insert(stores, status=Status.SCHEDULED, due_in_s=-30)
    future = await insert(stores, status=Status.SCHEDULED, due_in_s=30)
    [scheduler] = replicas(stores, broker, 1, grace_s=60)
    assert await scheduler.fire_due_campaigns(utcnow()) == 2
    stored = {cid: await stores.campaigns.get(cid) for cid in (late, on_time, future)}
    missed = stored[late]
    assert missed is not None and missed.status is Status.MISSED
    assert missed.error is not None and "beyond the misfire grace of 60s" in missed.error
    assert [c.status if c else None for c in (stored[on_time], stored[future])] == [
        Status.PENDING, Status.SCHEDULED]
    assert 29 < await scheduler.seconds_until_due(utcnow()) <= 30  # type: ignore[operator]


@pytest.mark.parametrize("overdue_s", [10, 120], ids=["due", "beyond-the-grace"])
async def test_a_campaign_moved_later_after_it_was_read_as_due_is_neither_fired_nor_missed(
        stores: Stores, broker: RabbitBroker, monkeypatch: pytest.MonkeyPatch,
        overdue_s: float) -> None:
    """Issue 30: a ``PATCH`` of ``send_at`` lands between the scheduler's read and its guarded
    write; the write includes the ``due_at`` it read, so the campaign waits for its new time."""
    campaign_id = await insert(stores, status=Status.SCHEDULED, due_in_s=-overdue_s)
    read_due = stores.campaigns.due_scheduled
    later = (utcnow() + timedelta(hours=1)).isoformat()

    async def read_then_moved(now: datetime, limit: int = 100) -> list[Campaign]:
        due = await read_due(now, limit)
        for campaign in due:
            await edit_scheduled(stores.campaigns, campaign.id,
                                 CampaignPatch.model_validate({"send_at": later}), Role.OPERATOR, ACTOR)
        return due

    monkeypatch.setattr(stores.campaigns, "due_scheduled", read_then_moved)
    [scheduler] = replicas(stores, broker, 1, grace_s=60)
    assert await scheduler.fire_due_campaigns(utcnow()) == 0
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.status is Status.SCHEDULED
    assert stored.due_at > utcnow() + timedelta(minutes=59)
    monkeypatch.undo()
    assert await scheduler.fire_due_campaigns(stored.due_at) == 1  # at its new time it fires
    fired = await stores.campaigns.get(campaign_id)
    assert fired is not None and fired.status is Status.PENDING


async def test_three_replicas_run_a_due_schedule_exactly_once(
        stores: Stores, broker: RabbitBroker, db: Database) -> None:
    schedule = await schedule_due(stores, overdue_s=0.1)
    now = utcnow()
    await asyncio.gather(*(r.run_due_schedules(now) for r in replicas(stores, broker, 3)))
    runs = await runs_of(db, schedule.id)
    stored = await stores.schedules.get(schedule.id)
    assert len(runs) == 1
    assert runs[0].status is Status.PENDING
    assert runs[0].due_at == schedule.next_run_at
    assert stored is not None and stored.next_run_at is not None
    assert stored.next_run_at > now
    assert stored.claim is None
    assert [(r.outcome, r.campaign_id) for r in stored.runs] == [("fired", runs[0].id)]


async def test_a_replica_that_died_holding_a_claim_is_taken_over_without_a_second_run(
        stores: Stores, broker: RabbitBroker, db: Database) -> None:
    schedule = await schedule_due(stores, overdue_s=1)
    dead, alive = replicas(stores, broker, 2, lease_s=0.3)
    occurrence = schedule.next_run_at
    assert occurrence is not None
    # The dead replica claimed the occurrence and inserted its run, then died before advancing.
    await stores.schedules.claim(schedule.id, occurrence, "scheduler-0", utcnow(),
                                 utcnow() + timedelta(seconds=0.3))
    await dead._start_run(schedule, occurrence, utcnow())
    assert await alive.run_due_schedules(utcnow()) == 0  # the lease still holds
    ran = await eventually(lambda: alive.run_due_schedules(utcnow()), timeout_s=5,
                           what="the lease to expire and the occurrence to be taken over")
    assert ran == 1
    assert len(await runs_of(db, schedule.id)) == 1
    stored = await stores.schedules.get(schedule.id)
    assert stored is not None and stored.next_run_at is not None
    assert stored.next_run_at > occurrence


async def test_occurrences_missed_while_down_are_recorded_and_the_latest_runs_if_in_grace(
        stores: Stores, broker: RabbitBroker, db: Database) -> None:
    # Every minute, next run planned 9 minutes before the current minute began: 10
    # occurrences are overdue, and only the latest (< 60 s late) is within the grace.
    this_minute = utcnow().replace(second=0, microsecond=0)
    schedule = await schedule_due(stores, overdue_s=0, cron="* * * * *",
                                  next_run_at=this_minute - timedelta(minutes=9))
    [scheduler] = replicas(stores, broker, 1, grace_s=60)
    await scheduler.run_due_schedules(utcnow())
    stored = await stores.schedules.get(schedule.id)
    assert stored is not None
    outcomes = [r.outcome for r in stored.runs]
    assert outcomes == ["missed", "fired"]
    assert stored.missed_total == 9
    assert "9 occurrences" in (stored.runs[0].reason or "")
    assert len(await runs_of(db, schedule.id)) == 1


async def test_a_paused_schedule_does_not_run(stores: Stores, broker: RabbitBroker,
                                              db: Database) -> None:
    schedule = await schedule_due(stores, overdue_s=1, state=ScheduleState.PAUSED)
    [scheduler] = replicas(stores, broker, 1)
    assert await scheduler.run_due_schedules(utcnow()) == 0
    assert await runs_of(db, schedule.id) == []
