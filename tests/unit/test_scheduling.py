"""Firing what is due, to the second, by any number of replicas, and nothing twice; marking
missed what is overdue beyond the misfire grace; editing and ending schedules."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from herald.clock import utcnow
from herald.contracts.http import CampaignPatch, CampaignTemplate, DeviceIn, ScheduleCreate
from herald.domain.access import Actor, ActorKind, Role
from herald.domain.approval import approval_of
from herald.domain.documents import (
    Campaign,
    Schedule,
    ScheduleClaim,
    ScheduleRunRecord,
    ScheduleState,
    new_id,
)
from herald.domain.purpose import Purpose
from herald.domain.status import Status
from herald.service_layer.approval import ApprovalGate
from herald.service_layer.campaigns import CampaignCreator, edit_scheduled
from herald.service_layer.ports import Stores
from herald.service_layer.scheduling import (
    ScheduleEnded,
    SchedulerPolicy,
    Scheduling,
    create_schedule,
    end_schedule,
    local_time,
    replan,
)
from tests.factories import ACTOR, insert, schedule
from tests.factories import campaign as a_campaign
from tests.unit.fakes import FakeBus, FakeCampaigns, FakeSchedules, fake_stores

GRACE_S = 60
NOW = datetime(2030, 1, 1, 9, 0, 30, tzinfo=UTC)
"""Thirty seconds after a nine o'clock occurrence."""


def scheduling(stores: Stores, bus: FakeBus, pod_id: str = "scheduler-1") -> Scheduling:
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus)
    return Scheduling(stores.campaigns, stores.schedules, creator,
                      SchedulerPolicy(pod_id=pod_id, misfire_grace_s=GRACE_S, lease_s=30))


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def stored_schedule(stores: Stores, schedule_id: str) -> Schedule:
    found = await stores.schedules.get(schedule_id)
    assert found is not None
    return found


async def runs_of(stores: Stores, schedule_id: str) -> list[Campaign]:
    return [c for c in await stores.campaigns.page(None, None, 100)
            if c.schedule_id == schedule_id]


# --- one-off campaigns -------------------------------------------------------------------------
async def test_a_due_campaign_is_fired_and_a_dispatcher_woken(stores: Stores,
                                                               bus: FakeBus) -> None:
    campaign_id = await insert(stores, due_in_s=-10, status=Status.SCHEDULED)
    now = utcnow()
    assert await scheduling(stores, bus).fire_due_campaigns(now) == 1
    fired = await stored(stores, campaign_id)
    assert (fired.status, fired.fired_at, fired.fired_by) == (Status.PENDING, now, "scheduler-1")
    assert bus.dispatches == [campaign_id]


async def test_a_campaign_overdue_beyond_the_grace_is_missed_with_the_reason(
        stores: Stores, bus: FakeBus) -> None:
    campaign_id = await insert(stores, due_in_s=-(GRACE_S + 30), status=Status.SCHEDULED)
    now = utcnow()
    assert await scheduling(stores, bus).fire_due_campaigns(now) == 1
    missed = await stored(stores, campaign_id)
    assert (missed.status, missed.finished_at) == (Status.MISSED, now)
    assert missed.error is not None and "beyond the misfire grace of 60s" in missed.error
    assert bus.dispatches == []


@pytest.mark.parametrize(("overdue_s", "status"), [(GRACE_S, Status.PENDING),
                                                   (GRACE_S + 0.001, Status.MISSED)])
async def test_a_campaign_overdue_by_exactly_the_grace_is_still_fired(
        stores: Stores, bus: FakeBus, overdue_s: float, status: Status) -> None:
    campaign_id = await insert(stores, status=Status.SCHEDULED, due_at=NOW)
    await scheduling(stores, bus).fire_due_campaigns(NOW + timedelta(seconds=overdue_s))
    assert (await stored(stores, campaign_id)).status is status


async def test_a_campaign_not_due_yet_is_left_alone(stores: Stores, bus: FakeBus) -> None:
    campaign_id = await insert(stores, due_in_s=30, status=Status.SCHEDULED)
    assert await scheduling(stores, bus).fire_due_campaigns(utcnow()) == 0
    assert (await stored(stores, campaign_id)).status is Status.SCHEDULED


class MovedAfterTheRead(FakeCampaigns):
    """A ``PATCH`` moves every due campaign an hour later right after the scheduler read it."""

    async def due_scheduled(self, now: datetime, limit: int = 100) -> list[Campaign]:
        due = await super().due_scheduled(now, limit)
        later = (utcnow() + timedelta(hours=1)).isoformat()
        for campaign in due:
            await edit_scheduled(self, campaign.id,
                                 CampaignPatch.model_validate({"send_at": later}), Role.OPERATOR, ACTOR)
        return due


@pytest.mark.parametrize("overdue_s", [10, GRACE_S + 30], ids=["due", "beyond-the-grace"])
async def test_a_campaign_moved_later_after_it_was_read_as_due_is_left_for_its_new_time(
        bus: FakeBus, overdue_s: float) -> None:
    """Issue 30: neither fired nor missed; it waits, scheduled, for the time it was moved to."""
    stores = replace(fake_stores(), campaigns=MovedAfterTheRead())
    campaign_id = await insert(stores, due_in_s=-overdue_s, status=Status.SCHEDULED)
    assert await scheduling(stores, bus).fire_due_campaigns(utcnow()) == 0
    after = await stored(stores, campaign_id)
    assert after.status is Status.SCHEDULED and after.due_at > utcnow()
    assert bus.dispatches == []
    assert 3500 < await scheduling(stores, bus).seconds_until_due(utcnow()) <= 3600  # type: ignore[operator]


async def test_three_replicas_fire_each_due_campaign_once(stores: Stores, bus: FakeBus) -> None:
    ids = [await insert(stores, due_in_s=-1, status=Status.SCHEDULED) for _ in range(5)]
    now = utcnow()
    replicas = [scheduling(stores, bus, f"scheduler-{i}") for i in range(3)]
    handled = await asyncio.gather(*(r.fire_due_campaigns(now) for r in replicas))
    assert sum(handled) == 5
    assert sorted(bus.dispatches) == sorted(ids)


async def test_the_wait_is_until_the_earliest_campaign_or_schedule(stores: Stores,
                                                                    bus: FakeBus) -> None:
    now = utcnow()
    assert await scheduling(stores, bus).seconds_until_due(now) is None
    await insert(stores, due_in_s=120, status=Status.SCHEDULED)
    await stores.schedules.insert(schedule(next_run_at=now + timedelta(seconds=30)))
    assert await scheduling(stores, bus).seconds_until_due(now) == 30.0
    assert await scheduling(stores, bus).seconds_until_due(now + timedelta(minutes=5)) == 0.0


# --- schedules ---------------------------------------------------------------------------------
async def test_a_due_occurrence_runs_a_campaign_and_the_schedule_moves_on(
        stores: Stores, bus: FakeBus) -> None:
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0))
    await stores.schedules.insert(due)
    assert await scheduling(stores, bus).run_due_schedules(NOW) == 1
    after = await stored_schedule(stores, due.id)
    [run] = await runs_of(stores, due.id)
    assert (run.status, run.source, run.due_at) == (Status.PENDING, "schedule", due.next_run_at)
    assert (run.fired_at, run.fired_by) == (NOW, "scheduler-1")
    assert run.run_key == f"{due.id}:{NOW.replace(second=0).isoformat()}"
    assert (run.content.title, run.content.body) == ("t", "b")
    assert after.next_run_at == datetime(2030, 1, 2, 9, 0, tzinfo=UTC) and after.claim is None
    assert [(r.outcome, r.campaign_id) for r in after.runs] == [("fired", run.id)]
    assert bus.dispatches == [run.id]


async def test_occurrences_missed_while_no_scheduler_ran_are_recorded_and_the_latest_runs(
        stores: Stores, bus: FakeBus) -> None:
    due = schedule(cron="*/5 * * * *", next_run_at=datetime(2030, 1, 1, 8, 30, tzinfo=UTC))
    await stores.schedules.insert(due)
    await scheduling(stores, bus).run_due_schedules(NOW)
    after = await stored_schedule(stores, due.id)
    [run] = await runs_of(stores, due.id)
    missed, fired = after.runs
    assert (missed.outcome, missed.occurrence) == ("missed", datetime(2030, 1, 1, 8, 55,
                                                                      tzinfo=UTC))
    assert missed.reason is not None and missed.reason.startswith("6 occurrences up to this one")
    assert (fired.outcome, fired.occurrence, fired.campaign_id) == ("fired", NOW.replace(second=0),
                                                                    run.id)
    assert after.missed_total == 6
    assert after.next_run_at == datetime(2030, 1, 1, 9, 5, tzinfo=UTC)


async def test_an_occurrence_overdue_beyond_the_grace_is_missed_not_sent_late(
        stores: Stores, bus: FakeBus) -> None:
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0))
    await stores.schedules.insert(due)
    late = NOW + timedelta(minutes=10)
    await scheduling(stores, bus).run_due_schedules(late)
    after = await stored_schedule(stores, due.id)
    assert await runs_of(stores, due.id) == []
    assert [(r.outcome, r.reason) for r in after.runs] == [
        ("missed", "1 occurrence overdue beyond the misfire grace of 60s (scheduler down?)")]
    assert after.next_run_at == datetime(2030, 1, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(("overdue_s", "outcome"), [(GRACE_S, "fired"),
                                                    (GRACE_S + 0.001, "missed")])
async def test_an_occurrence_overdue_by_exactly_the_grace_still_runs(
        stores: Stores, bus: FakeBus, overdue_s: float, outcome: str) -> None:
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0))
    await stores.schedules.insert(due)
    await scheduling(stores, bus).run_due_schedules(
        NOW.replace(second=0) + timedelta(seconds=overdue_s))
    assert [r.outcome for r in (await stored_schedule(stores, due.id)).runs] == [outcome]


async def test_a_schedules_own_grace_overrides_the_default(stores: Stores,
                                                           bus: FakeBus) -> None:
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0), misfire_grace_s=3600)
    await stores.schedules.insert(due)
    await scheduling(stores, bus).run_due_schedules(NOW + timedelta(minutes=10))
    assert len(await runs_of(stores, due.id)) == 1


async def test_an_occurrence_another_replica_holds_is_left_to_it(stores: Stores,
                                                                 bus: FakeBus) -> None:
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0),
                   claim=ScheduleClaim(by="scheduler-2", until=NOW + timedelta(seconds=10)))
    await stores.schedules.insert(due)
    assert await scheduling(stores, bus).run_due_schedules(NOW) == 0
    assert await runs_of(stores, due.id) == []


class DiesBeforeAdvancing(FakeSchedules):
    """Schedules in memory; while ``dying``, the replica writing ends between storing its run
    and advancing the schedule."""

    dying = True

    async def advance(self, claimed: Schedule, pod_id: str, next_run_at: datetime | None,
                      runs: Sequence[ScheduleRunRecord], missed: int, now: datetime) -> bool:
        if self.dying:
            raise ConnectionError("the replica died here")
        return await super().advance(claimed, pod_id, next_run_at, runs, missed, now)


async def die_after_creating_the_run(bus: FakeBus, grace_s: int) -> tuple[Stores, Schedule]:
    """A replica ran the nine o'clock occurrence 30 s late, then died; its claim has expired."""
    schedules = DiesBeforeAdvancing()
    stores = replace(fake_stores(), schedules=schedules)
    due = schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0), misfire_grace_s=grace_s)
    await stores.schedules.insert(due)
    with pytest.raises(ConnectionError):
        await scheduling(stores, bus, "dead").run_due_schedules(NOW)
    schedules.dying = False
    return stores, due


async def test_a_replica_that_died_after_creating_the_run_leaves_no_duplicate(
        bus: FakeBus) -> None:
    stores, due = await die_after_creating_the_run(bus, grace_s=3600)
    await scheduling(stores, bus).run_due_schedules(NOW + timedelta(seconds=31))
    runs = await runs_of(stores, due.id)
    after = await stored_schedule(stores, due.id)
    assert len(runs) == 1 and runs[0].fired_by == "dead"
    assert [(r.outcome, r.campaign_id) for r in after.runs] == [("fired", runs[0].id)]
    assert after.next_run_at == datetime(2030, 1, 2, 9, 0, tzinfo=UTC)


async def test_an_occurrence_whose_run_went_out_is_never_recorded_as_missed(
        bus: FakeBus) -> None:
    """The dead replica's run was created (and its dispatcher woken) within the grace; the
    replica that takes over after the claim expired is past the grace by then. The history
    must still say the occurrence fired, with its campaign, not that it was missed."""
    stores, due = await die_after_creating_the_run(bus, grace_s=GRACE_S)
    await scheduling(stores, bus).run_due_schedules(NOW + timedelta(seconds=31))
    [run] = await runs_of(stores, due.id)
    after = await stored_schedule(stores, due.id)
    assert bus.dispatches == [run.id]  # it went out
    assert [(r.outcome, r.campaign_id) for r in after.runs] == [("fired", run.id)]
    assert after.missed_total == 0


async def test_three_replicas_run_each_occurrence_once(stores: Stores, bus: FakeBus) -> None:
    made = [schedule(cron="0 9 * * *", next_run_at=NOW.replace(second=0)) for _ in range(4)]
    for each in made:
        await stores.schedules.insert(each)
    replicas = [scheduling(stores, bus, f"scheduler-{i}") for i in range(3)]
    handled = await asyncio.gather(*(r.run_due_schedules(NOW) for r in replicas))
    assert sum(handled) == 4
    assert len(await stores.campaigns.page(None, None, 100)) == 4


async def test_a_paused_schedule_does_not_run(stores: Stores, bus: FakeBus) -> None:
    due = schedule(next_run_at=NOW.replace(second=0), state=ScheduleState.PAUSED)
    await stores.schedules.insert(due)
    assert await scheduling(stores, bus).run_due_schedules(NOW) == 0


# --- making, editing and ending schedules ------------------------------------------------------
def create_request(**fields: object) -> ScheduleCreate:
    return ScheduleCreate.model_validate({"template": {"title": "t", "body": "b"},
                                          "cron": "0 9 * * MON", "timezone": "Asia/Seoul",
                                          **fields})


async def test_a_new_schedule_is_due_at_its_next_occurrence_in_its_timezone(
        stores: Stores) -> None:
    made = await create_schedule(stores.schedules, create_request(name="weekly"), ACTOR)
    assert made.next_run_at is not None and made.next_run_at > utcnow()
    local = local_time(made.next_run_at, made.timezone)
    assert local is not None and local.endswith("T09:00:00+09:00")
    assert datetime.fromisoformat(local).weekday() == 0
    assert await stored_schedule(stores, made.id) == made


async def test_changing_the_cron_recomputes_the_next_run_from_now(stores: Stores) -> None:
    made = await create_schedule(stores.schedules, create_request(), ACTOR)
    moved = await replan(stores.schedules, made.id, {"cron": "30 18 * * *", "timezone": "UTC"}, ACTOR)
    assert moved is not None and moved.next_run_at is not None
    assert (moved.next_run_at.hour, moved.next_run_at.minute) == (18, 30)
    assert moved.next_run_at - utcnow() <= timedelta(days=1)


async def test_pausing_keeps_the_next_run_and_resuming_recomputes_it(stores: Stores) -> None:
    made = await create_schedule(stores.schedules, create_request(), ACTOR)
    stale = replace(made, next_run_at=datetime(2020, 1, 6, 0, 0, tzinfo=UTC))
    await stores.schedules.update(made.id, {"next_run_at": stale.next_run_at})
    paused = await replan(stores.schedules, made.id, {"state": "paused"}, ACTOR)
    resumed = await replan(stores.schedules, made.id, {"state": "active"}, ACTOR)
    assert paused is not None and paused.state is ScheduleState.PAUSED
    assert paused.next_run_at == stale.next_run_at
    assert resumed is not None and resumed.state is ScheduleState.ACTIVE
    assert resumed.next_run_at == made.next_run_at  # from now, not the past


async def test_renaming_leaves_the_timing_alone(stores: Stores) -> None:
    made = await create_schedule(stores.schedules, create_request(), ACTOR)
    renamed = await replan(stores.schedules, made.id, {"name": "renamed"}, ACTOR)
    assert renamed is not None
    assert (renamed.name, renamed.next_run_at) == ("renamed", made.next_run_at)


async def test_an_ended_schedule_has_no_next_run_and_refuses_edits(stores: Stores) -> None:
    made = await create_schedule(stores.schedules, create_request(), ACTOR)
    ended = await end_schedule(stores.schedules, made.id, ACTOR)
    assert ended is not None
    assert (ended.state, ended.next_run_at) == (ScheduleState.ENDED, None)
    with pytest.raises(ScheduleEnded):
        await replan(stores.schedules, made.id, {"state": "active"}, ACTOR)


async def test_an_unknown_schedule_is_neither_edited_nor_ended(stores: Stores) -> None:
    assert await replan(stores.schedules, new_id(), {"name": "x"}, ACTOR) is None
    assert await end_schedule(stores.schedules, new_id(), ACTOR) is None


# --- approval at its time ----------------------------------------------------------------------
def approving_scheduling(stores: Stores, bus: FakeBus, min_audience: int) -> Scheduling:
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus,
                              ApprovalGate(stores.devices, min_audience))
    return Scheduling(stores.campaigns, stores.schedules, creator,
                      SchedulerPolicy(pod_id="scheduler-1", misfire_grace_s=GRACE_S, lease_s=30))


async def register(stores: Stores, count: int) -> None:
    await stores.devices.upsert([DeviceIn(token=f"tok-{i}", platform="ios")
                                 for i in range(count)], utcnow())


async def test_a_campaign_whose_audience_grew_to_the_threshold_waits_at_its_time(
        stores: Stores, bus: FakeBus) -> None:
    campaign_id = await insert(stores, due_in_s=-1, status=Status.SCHEDULED,
                               audience_estimate=0)  # counted 0 when it was made
    await register(stores, 3)
    assert await approving_scheduling(stores, bus, 3).fire_due_campaigns(utcnow()) == 1
    held = await stored(stores, campaign_id)
    assert (held.status, held.audience_estimate, held.approval_required) == (
        Status.AWAITING_APPROVAL, 3, True)
    assert bus.dispatches == []


async def test_an_approved_campaign_or_a_small_one_fires_at_its_time(
        stores: Stores, bus: FakeBus) -> None:
    await register(stores, 3)
    small = await insert(stores, due_in_s=-1, status=Status.SCHEDULED)
    approved = a_campaign(-1, status=Status.SCHEDULED, approval_required=True)
    approved = replace(approved, approvals=(approval_of(approved, ACTOR, utcnow()),))
    await stores.campaigns.insert(approved)
    assert await approving_scheduling(stores, bus, 4).fire_due_campaigns(utcnow()) == 2
    assert await approving_scheduling(stores, bus, 3).fire_due_campaigns(utcnow()) == 0
    assert sorted(bus.dispatches) == sorted([small, approved.id])


async def test_whoever_replaced_a_schedule_s_template_is_an_editor_of_its_runs(
        stores: Stores, bus: FakeBus) -> None:
    made = await create_schedule(stores.schedules, create_request(), ACTOR)
    author = Actor(id="k2", name="b", kind=ActorKind.API_KEY, owner="bea")
    # Transactional: the fakes' devices never opted in to marketing, and all must count.
    template = CampaignTemplate(title="B's", body="text",
                                purpose=Purpose.TRANSACTIONAL).model_dump(mode="json")
    await replan(stores.schedules, made.id, {"template": template}, author)
    renamed = await replan(stores.schedules, made.id, {"name": "n", "template": template},
                           replace(author, id="k3"))
    assert renamed is not None and renamed.template_authors == (author,)
    await stores.schedules.update(made.id, {"next_run_at": NOW.replace(second=0)})
    await register(stores, 3)
    assert await approving_scheduling(stores, bus, 3).run_due_schedules(NOW) == 1
    [run] = await runs_of(stores, made.id)
    assert (run.status, run.created_by, run.editors) == (
        Status.AWAITING_APPROVAL, ACTOR, (author,))


async def test_a_schedules_runs_take_its_templates_frequency_cap(stores: Stores,
                                                                  bus: FakeBus) -> None:
    made = await create_schedule(stores.schedules, create_request(template={
        "title": "t", "body": "b", "frequency_cap": " 1/7d"}), ACTOR)
    assert made.template["frequency_cap"] == "1/7d"
    await stores.schedules.update(made.id, {"next_run_at": NOW.replace(second=0)})
    assert await scheduling(stores, bus).run_due_schedules(NOW) == 1
    [run] = await runs_of(stores, made.id)
    assert (run.purpose, run.frequency_cap) == (Purpose.MARKETING, "1/7d")
