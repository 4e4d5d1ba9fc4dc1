"""Approval of large sends on the in-process api (real nx-27017, RabbitMQ and Redis behind it),
with ``HERALD_APPROVAL_MIN_AUDIENCE=3``: self-approval refused, a second key approves, an edit of
what was approved holds it again, a cancel needs none, a schedule's large run waits, and every
refused call changes nothing. That an approved campaign is then sent (and nothing before) is
``tests/e2e/test_safe_sending.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from faststream.rabbit import RabbitBroker
from pydantic import SecretStr

from herald import names
from herald.adapters import rabbit
from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.contracts.http import AmendRequest, RetargetRequest
from herald.domain.access import Role
from herald.domain.rollout import RolloutProgress
from herald.domain.status import Status, Transition
from herald.service_layer.approval import ApprovalGate
from herald.service_layer.campaigns import CampaignCreator
from herald.service_layer.scheduling import SchedulerPolicy, Scheduling
from herald.settings import Settings
from services.api.app import create_app
from tests.factories import ACTOR, CAMPAIGN_BODY, cancelled_paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code

MIN_AUDIENCE = 3
LARGE = {"topics": ["large"]}
SMALL = {"topics": ["small"]}


@pytest.fixture
async def approving_app(broker_settings: Settings, db: Database, redis: Any,
                        admin_key: str) -> AsyncIterator[FastAPI]:
    app = create_app(broker_settings.model_copy(update={
        "bootstrap_api_key": SecretStr(admin_key), "approval_min_audience": MIN_AUDIENCE}))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def admin(approving_app: FastAPI, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(approving_app, admin_key) as client:
        # opted in to marketing: the campaigns here are marketing (the default) and must count them
        devices = [{"token": f"tok-large-{i}", "platform": "android", "topics": ["large"],
                    "user_id": f"u{i}", "marketing_enabled": True} for i in range(MIN_AUDIENCE)]
        devices.append({"token": "tok-small-0", "platform": "ios", "topics": ["small"],
                        "marketing_enabled": True})
        assert (await client.post("/v1/devices/bulk", json={"devices": devices})).is_success
        yield client


@pytest.fixture
async def keys(admin: httpx.AsyncClient) -> dict[str, str]:
    """Keys of four people, each the owner of its key (named after them)."""
    return {name: await mint(admin, role, name, owner=name) for name, role in (
        ("marketing", Role.OPERATOR), ("reviewer", Role.OPERATOR), ("lead", Role.RESPONDER),
        ("watcher", Role.VIEWER), ("third", Role.OPERATOR))}


async def _create(app: FastAPI, key: str, **body: Any) -> dict[str, Any]:
    async with client_of(app, key) as client:
        response = await client.post("/v1/campaigns", json={**CAMPAIGN_BODY, **body})
    assert response.status_code == 202, response.text
    return dict(response.json())


async def _call(app: FastAPI, key: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with client_of(app, key) as client:
        return await client.request(method, path, **kwargs)


async def _approve(app: FastAPI, key: str, campaign_id: str) -> httpx.Response:
    """Approve as an approver does: read the campaign, send back the digest read."""
    async with client_of(app, key) as client:
        seen = (await client.get(f"/v1/campaigns/{campaign_id}")).json()["content_digest"]
        return await client.post(f"/v1/campaigns/{campaign_id}/approve", json={"digest": seen})


async def _snapshot(db: Database) -> list[dict[str, Any]]:
    return [doc async for doc in db[names.CAMPAIGNS].find({}, sort=[("_id", 1)])]


async def test_a_large_campaign_waits_and_its_creator_cannot_approve_it(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        db: Database) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE)
    small = await _create(approving_app, keys["marketing"], audience=SMALL)
    assert (created["status"], small["status"]) == ("awaiting_approval", "pending")
    before = await _snapshot(db)
    own = await _approve(approving_app, keys["marketing"], created["id"])
    viewer = await _approve(approving_app, keys["watcher"], created["id"])
    responder = await _approve(approving_app, keys["lead"], created["id"])
    assert (own.status_code, error_code(own)) == (403, "self_approval")
    assert "created it" in own.json()["error"]["message"]
    assert (viewer.status_code, error_code(viewer)) == (403, "forbidden")
    assert (responder.status_code, error_code(responder)) == (403, "forbidden")
    assert "campaigns:approve" in responder.json()["error"]["message"]
    assert await _snapshot(db) == before, "a refused approval changed something"
    view = (await admin.get(f"/v1/campaigns/{created['id']}")).json()
    assert (view["status"], view["approval"], view["approval_required"],
            view["audience_estimate"]) == ("awaiting_approval", None, True, MIN_AUDIENCE)


async def test_a_second_key_approves_and_it_is_handed_to_the_dispatchers(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str]) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE)
    approved = await _approve(approving_app, keys["reviewer"], created["id"])
    assert approved.status_code == 200, approved.text
    view = (await admin.get(f"/v1/campaigns/{created['id']}")).json()
    assert view["status"] == "pending"
    assert view["approval"]["by"]["name"] == "reviewer"
    assert view["approval"]["digest"] == view["content_digest"]
    assert view["approval"]["at"] is not None
    again = await _approve(approving_app, keys["reviewer"], created["id"])
    assert (again.status_code, error_code(again)) == (409, "not_awaiting_approval")
    log = (await admin.get("/v1/operator-log", params={"campaign_id": created["id"]})).json()
    approval_entry = next(e for e in log["items"] if e["outcome"] == "done"
                          and e["action"] == "campaign.approve")
    assert approval_entry["detail"] == f"digest={view['content_digest']} now pending"
    assert [(e["action"], e["actor"]["name"], e["outcome"]) for e in reversed(log["items"])] == [
        ("campaign.create", "marketing", "done"), ("campaign.approve", "reviewer", "done"),
        ("campaign.approve", "reviewer", "rejected")]


async def test_an_approval_is_of_what_the_approver_read(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str]) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE,
                            send_at=(utcnow() + timedelta(hours=1)).isoformat())
    seen = (await admin.get(f"/v1/campaigns/{created['id']}")).json()["content_digest"]
    edited = await _call(approving_app, keys["marketing"], "PATCH",
                         f"/v1/campaigns/{created['id']}", json={"title": "Changed meanwhile"})
    assert (edited.status_code, edited.json()["status"]) == (200, "awaiting_approval")
    stale = await _call(approving_app, keys["reviewer"], "POST",
                        f"/v1/campaigns/{created['id']}/approve", json={"digest": seen})
    assert (stale.status_code, error_code(stale)) == (409, "approval_stale")
    fresh = edited.json()["content_digest"]
    approved = await _call(approving_app, keys["reviewer"], "POST",
                           f"/v1/campaigns/{created['id']}/approve", json={"digest": fresh})
    assert (approved.status_code, approved.json()["status"]) == (200, "scheduled")


async def test_an_edit_of_what_was_approved_holds_it_again_and_a_move_does_not(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str]) -> None:
    later = utcnow() + timedelta(hours=1)
    created = await _create(approving_app, keys["marketing"], audience=LARGE,
                            send_at=later.isoformat())
    path = f"/v1/campaigns/{created['id']}"
    approved = await _approve(approving_app, keys["reviewer"], created["id"])
    assert approved.json()["status"] == "scheduled"  # approved before its time: waits for it
    moved = await _call(approving_app, keys["marketing"], "PATCH", path,
                        json={"send_at": (later + timedelta(hours=1)).isoformat()})
    assert moved.json()["status"] == "scheduled"
    assert moved.json()["approval"]["by"]["name"] == "reviewer"
    changed = await _call(approving_app, keys["marketing"], "PATCH", path,
                          json={"data": {"landingUrl": "https://elsewhere.test"}})
    view = changed.json()
    assert (view["status"], view["approval"]) == ("awaiting_approval", None)
    assert view["approvals"][-1]["revoked_by"]["name"] == "marketing"
    assert view["approvals"][-1]["revoked_at"] is not None


async def test_a_small_scheduled_campaign_edited_to_a_large_audience_needs_approval(
        approving_app: FastAPI, keys: dict[str, str]) -> None:
    created = await _create(approving_app, keys["marketing"], audience=SMALL,
                            send_at=(utcnow() + timedelta(hours=1)).isoformat())
    assert created["status"] == "scheduled"
    widened = await _call(approving_app, keys["marketing"], "PATCH",
                          f"/v1/campaigns/{created['id']}", json={"audience": LARGE})
    assert (widened.json()["status"], widened.json()["audience_estimate"]) == (
        "awaiting_approval", MIN_AUDIENCE)


async def test_a_campaign_awaiting_approval_is_cancelled_at_once_without_one(
        approving_app: FastAPI, keys: dict[str, str]) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE)
    cancelled = await _call(approving_app, keys["lead"], "POST",
                            f"/v1/campaigns/{created['id']}/cancel", json={"reason": "no"})
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
    late = await _approve(approving_app, keys["reviewer"], created["id"])
    assert (late.status_code, error_code(late)) == (409, "not_awaiting_approval")


async def test_a_schedule_s_large_run_waits_for_a_key_other_than_the_schedule_s(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        broker: RabbitBroker) -> None:
    made = await _call(approving_app, keys["marketing"], "POST", "/v1/schedules", json={
        "template": {**CAMPAIGN_BODY, "audience": LARGE}, "cron": "* * * * *", "timezone": "UTC"})
    assert made.status_code == 201, made.text
    stores = approving_app.state.services.stores
    await stores.schedules.update(made.json()["id"],
                                  {"next_run_at": utcnow() - timedelta(seconds=1)})
    creator = CampaignCreator(stores.campaigns, stores.idempotency, rabbit.RabbitBus(broker),
                              ApprovalGate(stores.devices, MIN_AUDIENCE))
    scheduler = Scheduling(stores.campaigns, stores.schedules, creator,
                           SchedulerPolicy("scheduler-1", 300.0, 5.0))
    assert await scheduler.run_due_schedules(utcnow()) == 1
    schedule = (await admin.get(f"/v1/schedules/{made.json()['id']}")).json()
    run_id = schedule["runs"][0]["campaign_id"]
    run = (await admin.get(f"/v1/campaigns/{run_id}")).json()
    assert (run["status"], run["schedule_id"]) == ("awaiting_approval", made.json()["id"])
    own = await _approve(approving_app, keys["marketing"], run_id)
    assert (own.status_code, error_code(own)) == (403, "self_approval")
    assert "created its schedule" in own.json()["error"]["message"]
    approved = await _approve(approving_app, keys["reviewer"], run_id)
    assert approved.json()["status"] == "pending"


async def test_whoever_edited_it_cannot_approve_it_nor_any_key_of_the_same_person(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        db: Database) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE)
    edited = await _call(approving_app, keys["reviewer"], "PATCH",
                         f"/v1/campaigns/{created['id']}", json={"title": "Reviewer's text"})
    assert [e["name"] for e in edited.json()["editors"]] == ["reviewer"]
    second_key = await mint(admin, Role.OPERATOR, "reviewer's other key", owner="reviewer")
    before = await _snapshot(db)
    for key in (keys["reviewer"], second_key):
        refused = await _approve(approving_app, key, created["id"])
        assert (refused.status_code, error_code(refused)) == (403, "self_approval")
        assert "you (reviewer) changed it since its last approval" in \
            refused.json()["error"]["message"]
    marketing_too = await mint(admin, Role.ADMIN, "marketing's admin key", owner="marketing")
    own = await _approve(approving_app, marketing_too, created["id"])
    assert (own.status_code, error_code(own)) == (403, "self_approval")
    assert await _snapshot(db) == before, "a refused approval changed something"
    approved = await _approve(approving_app, keys["third"], created["id"])
    assert approved.status_code == 200, approved.text
    assert (approved.json()["status"], approved.json()["editors"]) == ("pending", [])


async def test_an_approval_without_the_digest_read_is_refused_and_changes_nothing(
        approving_app: FastAPI, keys: dict[str, str], db: Database) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE)
    before = await _snapshot(db)
    for body in (None, {}, {"digest": "not-a-digest"}):
        blind = await _call(approving_app, keys["reviewer"], "POST",
                            f"/v1/campaigns/{created['id']}/approve", json=body)
        assert blind.status_code == 422, (body, blind.text)
    assert await _snapshot(db) == before


async def test_a_schedule_s_template_author_cannot_approve_its_runs(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        broker: RabbitBroker) -> None:
    made = await _call(approving_app, keys["marketing"], "POST", "/v1/schedules", json={
        "template": {**CAMPAIGN_BODY, "audience": LARGE}, "cron": "* * * * *", "timezone": "UTC"})
    schedule_id = made.json()["id"]
    replaced = await _call(approving_app, keys["reviewer"], "PATCH",
                           f"/v1/schedules/{schedule_id}", json={"template": {
                               **CAMPAIGN_BODY, "title": "Reviewer's", "audience": LARGE}})
    assert replaced.status_code == 200, replaced.text
    assert [a["name"] for a in replaced.json()["template_authors"]] == ["reviewer"]
    run_id = await _run_now(approving_app, broker, schedule_id)
    run = (await admin.get(f"/v1/campaigns/{run_id}")).json()
    assert (run["status"], run["title"]) == ("awaiting_approval", "Reviewer's")
    for key in (keys["reviewer"], keys["marketing"]):
        refused = await _approve(approving_app, key, run_id)
        assert (refused.status_code, error_code(refused)) == (403, "self_approval")
    assert "created its schedule" in refused.json()["error"]["message"]
    approved = await _approve(approving_app, keys["third"], run_id)
    assert approved.json()["status"] == "pending"


async def _run_now(app: FastAPI, broker: RabbitBroker, schedule_id: str) -> str:
    """Run the schedule's next occurrence now, as a scheduler with the api's threshold would;
    the run's campaign id."""
    stores = app.state.services.stores
    await stores.schedules.update(schedule_id, {"next_run_at": utcnow() - timedelta(seconds=1)})
    assert await _scheduler(app, broker).run_due_schedules(utcnow()) == 1
    schedule = await stores.schedules.get(schedule_id)
    return str(schedule.runs[-1].campaign_id)


def _scheduler(app: FastAPI, broker: RabbitBroker) -> Scheduling:
    stores = app.state.services.stores
    creator = CampaignCreator(stores.campaigns, stores.idempotency, rabbit.RabbitBus(broker),
                              ApprovalGate(stores.devices, MIN_AUDIENCE))
    return Scheduling(stores.campaigns, stores.schedules, creator,
                      SchedulerPolicy("scheduler-1", 300.0, 5.0))


async def test_an_audience_that_grew_before_its_time_is_counted_again_and_waits(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        broker: RabbitBroker) -> None:
    due = utcnow() + timedelta(hours=1)
    created = await _create(approving_app, keys["marketing"], audience={"topics": ["later"]},
                            send_at=due.isoformat())
    assert created["status"] == "scheduled"  # nobody subscribed yet: counted 0
    devices = [{"token": f"tok-later-{i}", "platform": "ios", "topics": ["later"],
                "marketing_enabled": True} for i in range(MIN_AUDIENCE)]
    assert (await admin.post("/v1/devices/bulk", json={"devices": devices})).is_success
    assert await _scheduler(approving_app, broker).fire_due_campaigns(
        due + timedelta(seconds=1)) == 1
    view = (await admin.get(f"/v1/campaigns/{created['id']}")).json()
    assert (view["status"], view["audience_estimate"], view["approval_required"]) == (
        "awaiting_approval", MIN_AUDIENCE, True)


async def test_after_approval_wider_changes_need_a_new_one_and_narrower_do_not(
        approving_app: FastAPI, keys: dict[str, str]) -> None:
    later = utcnow() + timedelta(hours=2)
    created = await _create(approving_app, keys["marketing"], audience=LARGE, rate_per_s=100,
                            send_at=later.isoformat())
    path = f"/v1/campaigns/{created['id']}"
    assert (await _approve(approving_app, keys["reviewer"], created["id"])).is_success
    for narrower in ({"rate_per_s": 50}, {"send_at": (later + timedelta(hours=1)).isoformat()},
                     {"name": "renamed"}):
        kept = await _call(approving_app, keys["marketing"], "PATCH", path, json=narrower)
        assert (kept.json()["status"], kept.json()["approval"]["by"]["name"]) == (
            "scheduled", "reviewer"), narrower
    for wider in ({"rate_per_s": 150}, {"rate_per_s": None}, {"send_at": later.isoformat()}):
        revoked = await _call(approving_app, keys["marketing"], "PATCH", path, json=wider)
        assert (revoked.json()["status"], revoked.json()["approval"]) == (
            "awaiting_approval", None), wider
        again = await _approve(approving_app, keys["third"], created["id"])
        assert again.json()["status"] == "scheduled", again.text


async def test_a_sending_campaign_s_rate_above_the_approved_one_needs_a_new_approval(
        approving_app: FastAPI, admin: httpx.AsyncClient, keys: dict[str, str],
        db: Database) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE, rate_per_s=10)
    assert (await _approve(approving_app, keys["reviewer"], created["id"])).is_success
    stores = approving_app.state.services.stores
    await stores.campaigns.transition(created["id"], Transition.CLAIM, utcnow())
    path = f"/v1/campaigns/{created['id']}"
    before = await _snapshot(db)
    for wider in ({"rate_per_s": None}, {"rate_per_s": 11}):
        refused = await _call(approving_app, keys["marketing"], "PATCH", path, json=wider)
        assert (refused.status_code, error_code(refused)) == (403, "approval_required")
        assert "created it" in refused.json()["error"]["message"]
    assert await _snapshot(db) == before
    slower = await _call(approving_app, keys["marketing"], "PATCH", path, json={"rate_per_s": 5})
    assert slower.json()["rate_per_s"] == 5
    raised = await _call(approving_app, keys["third"], "PATCH", path, json={"rate_per_s": None})
    view = raised.json()
    assert (view["rate_per_s"], view["approval"]["by"]["name"]) == (None, "third")
    assert view["approval"]["digest"] == view["content_digest"]


async def test_a_resume_that_skips_an_approved_rollout_s_hold_is_refused_to_its_creator(
        approving_app: FastAPI, keys: dict[str, str], db: Database) -> None:
    created = await _create(approving_app, keys["marketing"], audience=LARGE, rollout={
        "waves": [{"percent": 50, "hold_s": 3600}, {"percent": 100}]})
    assert (await _approve(approving_app, keys["reviewer"], created["id"])).is_success
    stores = approving_app.state.services.stores
    await stores.campaigns.transition(created["id"], Transition.CLAIM, utcnow())
    await stores.campaigns.update_rollout(created["id"], 0, RolloutProgress(
        wave=0, hold_until=utcnow() + timedelta(hours=1)))
    before = await _snapshot(db)
    refused = await _call(approving_app, keys["marketing"], "POST",
                          f"/v1/campaigns/{created['id']}/resume")
    assert (refused.status_code, error_code(refused)) == (403, "approval_required")
    assert "skips a staged rollout's hold" in refused.json()["error"]["message"]
    assert await _snapshot(db) == before


async def test_follow_ups_of_one_original_are_judged_together_on_the_stores(
        approving_app: FastAPI, broker: RabbitBroker) -> None:
    """On nx-27017 (MongoDB's wire): the follow-ups of an original are found by their source,
    and what went without an approval is added to the next one's reach."""
    stores = approving_app.state.services.stores
    original = await cancelled_paged_campaign(stores)  # 12 sent, 17 unsent
    creator = CampaignCreator(stores.campaigns, stores.idempotency, rabbit.RabbitBus(broker),
                              ApprovalGate(stores.devices, 20))
    retarget = await creator.retarget(original.id, RetargetRequest(), ACTOR)
    amend = await creator.amend(original.id, AmendRequest(), ACTOR)
    assert retarget is not None and amend is not None
    assert (retarget.status, amend.status) == (Status.PENDING, Status.AWAITING_APPROVAL)
    assert [c.id for c in await stores.campaigns.follow_ups_of(original.id)] == [
        retarget.id, amend.id]
