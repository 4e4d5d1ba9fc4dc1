"""``/v1/schedules``, PATCH of scheduled campaigns and retry of failed ones, over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from herald.clock import utcnow
from herald.domain.documents import Campaign, FollowUpOf
from herald.domain.status import Status, Transition
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import FollowUpSource
from tests.factories import CAMPAIGN_BODY as CAMPAIGN
from tests.factories import at, paged_campaign
from tests.support import error_code

SCHEDULE = {"name": "weekly", "cron": "0 9 * * MON", "timezone": "Asia/Seoul",
            "template": {**CAMPAIGN, "audience": {"topics": ["news"]}}}


async def test_a_schedule_shows_its_next_run_in_utc_and_on_its_own_clock(
        api: httpx.AsyncClient) -> None:
    created = await api.post("/v1/schedules", json=SCHEDULE)
    assert created.status_code == 201
    view = created.json()
    next_run = datetime.fromisoformat(view["next_run_at"])
    assert next_run > datetime.now(UTC)
    assert next_run.weekday() == 0 and (next_run.hour, next_run.minute) == (0, 0)  # 09:00 KST
    assert view["next_run_local"].endswith("T09:00:00+09:00")
    assert view["state"] == "active" and view["runs"] == []
    fetched = await api.get(f"/v1/schedules/{view['id']}")
    assert fetched.json() == view


@pytest.mark.parametrize(("changes", "code"), [
    ({"cron": "every monday"}, "validation_error"),
    ({"cron": "61 9 * * *"}, "validation_error"),
    ({"timezone": "Mars/Olympus"}, "validation_error"),
    ({"template": {"title": "t"}}, "validation_error"),
    ({"template": {**CAMPAIGN, "data": {"n": 1}}}, "validation_error"),
])
async def test_bad_schedules_are_refused(api: httpx.AsyncClient, changes: dict[str, Any],
                                        code: str) -> None:
    response = await api.post("/v1/schedules", json={**SCHEDULE, **changes})
    assert response.status_code == 422
    assert error_code(response) == code


async def test_pause_resume_edit_and_end(api: httpx.AsyncClient) -> None:
    schedule_id = (await api.post("/v1/schedules", json=SCHEDULE)).json()["id"]
    paused = (await api.patch(f"/v1/schedules/{schedule_id}", json={"state": "paused"})).json()
    edited = (await api.patch(f"/v1/schedules/{schedule_id}",
                              json={"state": "active", "cron": "30 8 * * *",
                                    "timezone": "America/New_York"})).json()
    ended = await api.delete(f"/v1/schedules/{schedule_id}")
    after_end = await api.patch(f"/v1/schedules/{schedule_id}", json={"state": "active"})
    assert paused["state"] == "paused"
    assert edited["state"] == "active"
    assert "T08:30:00-0" in edited["next_run_local"]
    assert ended.json()["state"] == "ended" and ended.json()["next_run_at"] is None
    assert (after_end.status_code, error_code(after_end)) == (409, "schedule_ended")
    listed = (await api.get("/v1/schedules")).json()
    assert [s["id"] for s in listed["items"]] == [schedule_id]


async def test_a_scheduled_campaign_can_be_moved_and_edited_until_it_fires(
        api: httpx.AsyncClient, stores: Any) -> None:
    send_at = (utcnow() + timedelta(hours=2)).isoformat()
    created = await api.post("/v1/campaigns", json={**CAMPAIGN, "send_at": send_at})
    campaign_id = created.json()["id"]
    assert created.json()["status"] == "scheduled"
    moved = await api.patch(f"/v1/campaigns/{campaign_id}",
                            json={"send_at": "2099-01-05T09:00:00", "timezone": "Asia/Seoul",
                                  "title": "New title"})
    too_big = await api.patch(f"/v1/campaigns/{campaign_id}", json={"body": "x" * 4000,
                                                                    "title": "y" * 1000})
    assert moved.status_code == 200
    assert moved.json()["due_at"].startswith("2099-01-05T00:00:00")
    assert moved.json()["title"] == "New title" and moved.json()["body"] == CAMPAIGN["body"]
    assert (too_big.status_code, error_code(too_big)) == (422, "payload_too_large")
    await stores.campaigns.transition(campaign_id, Transition.FIRE, utcnow())
    late = await api.patch(f"/v1/campaigns/{campaign_id}", json={"title": "Too late"})
    assert (late.status_code, error_code(late)) == (409, "not_editable")


async def test_a_past_send_at_is_refused_when_moving_a_campaign(api: httpx.AsyncClient) -> None:
    send_at = (utcnow() + timedelta(hours=2)).isoformat()
    campaign_id = (await api.post("/v1/campaigns", json={**CAMPAIGN, "send_at": send_at})).json()["id"]
    response = await api.patch(f"/v1/campaigns/{campaign_id}",
                               json={"send_at": "2001-01-01T00:00:00Z"})
    assert (response.status_code, error_code(response)) == (422, "send_at_in_past")


async def test_retry_reruns_a_failed_campaign_for_the_recipients_it_did_not_reach(
        api: httpx.AsyncClient, stores: Any) -> None:
    campaign_id = await paged_campaign(stores)  # 12 sent, 1 failed (UNREGISTERED), 17 unsent
    await stores.deliveries.record(campaign_id, 1, "s", at([(3, "UNAVAILABLE")]), utcnow())
    running = await api.post(f"/v1/campaigns/{campaign_id}/retry")
    await stores.campaigns.transition(campaign_id, Transition.FAIL, utcnow())
    retried = await api.post(f"/v1/campaigns/{campaign_id}/retry")
    assert (running.status_code, error_code(running)) == (409, "not_retryable")
    assert retried.status_code == 202
    run = (await api.get(f"/v1/campaigns/{retried.json()['id']}")).json()
    assert run["retarget"] == {"campaign_id": campaign_id, "outcome": "not_sent"}
    parent = await stores.campaigns.get(campaign_id)
    assert parent is not None
    source_tokens = [line async for line in _not_reached(stores, parent)]
    assert "tok-00013" in source_tokens  # failed with UNAVAILABLE: retried
    assert "tok-00011" not in source_tokens  # failed with UNREGISTERED: a dead token
    assert len(source_tokens) == 1 + 16
    assert parent.status is Status.FAILED


async def _not_reached(stores: Stores, parent: Campaign) -> AsyncIterator[str]:
    source = FollowUpSource(stores, parent, FollowUpOf.NOT_SENT)
    async for _, recipient in source.stream(after=None):
        yield recipient.token


@pytest.mark.parametrize("timing", [
    {"send_at": "2099-01-05T09:00:00+09:00", "timezone": "Asia/Seoul"},
    {"send_at": "2099-01-05T09:00:00"},
    {},
])
async def test_local_time_delivery_needs_a_wall_clock_and_a_timezone(
        api: httpx.AsyncClient, timing: dict[str, str]) -> None:
    response = await api.post("/v1/campaigns",
                              json={**CAMPAIGN, **timing, "deliver_in_local_time": True})
    assert response.status_code == 422
    assert "deliver_in_local_time" in response.json()["error"]["message"]


async def test_a_local_time_campaign_waits_for_the_first_zone_to_reach_its_wall_clock(
        api: httpx.AsyncClient) -> None:
    created = await api.post("/v1/campaigns", json={
        **CAMPAIGN, "send_at": "2099-01-05T09:00:00", "timezone": "Asia/Seoul",
        "deliver_in_local_time": True})
    view = (await api.get(f"/v1/campaigns/{created.json()['id']}")).json()
    assert view["status"] == "scheduled"
    assert view["due_at"].startswith("2099-01-04T19:00:00")  # 09:00 in UTC+14, Kiribati
    assert view["local_time"] == {"wall": "2099-01-05T09:00:00", "timezone": "Asia/Seoul"}


async def test_nulls_in_a_patch_change_nothing(api: httpx.AsyncClient) -> None:
    schedule_id = (await api.post("/v1/schedules", json=SCHEDULE)).json()["id"]
    patched = await api.patch(f"/v1/schedules/{schedule_id}",
                              json={"state": None, "template": None, "cron": None})
    assert patched.status_code == 200
    assert patched.json()["state"] == "active"
    assert (await api.get("/v1/schedules")).status_code == 200
    send_at = (utcnow() + timedelta(hours=2)).isoformat()
    campaign_id = (await api.post("/v1/campaigns", json={**CAMPAIGN, "send_at": send_at})).json()["id"]
    kept = await api.patch(f"/v1/campaigns/{campaign_id}", json={"audience": None, "title": None})
    assert kept.status_code == 200
    assert kept.json()["audience"]["push_enabled"] is True
    assert kept.json()["title"] == CAMPAIGN["title"]


async def test_a_campaign_cancelled_before_it_targeted_anyone_cannot_be_retargeted(
        api: httpx.AsyncClient) -> None:
    send_at = (utcnow() + timedelta(hours=2)).isoformat()
    campaign_id = (await api.post("/v1/campaigns", json={**CAMPAIGN, "send_at": send_at})).json()["id"]
    assert (await api.post(f"/v1/campaigns/{campaign_id}/cancel")).json()["status"] == "cancelled"
    response = await api.post(f"/v1/campaigns/{campaign_id}/retarget")
    assert (response.status_code, error_code(response)) == (409, "not_retargetable")
    assert "create it again" in response.json()["error"]["message"]


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "every monday", "61 9 * * *"])
async def test_a_cron_that_never_happens_is_a_422_naming_cron(api: httpx.AsyncClient,
                                                             cron: str) -> None:
    """Issue 31: ``0 0 30 2 *`` answered 422 naming no field; on create and on edit it names
    ``cron``, and nothing is stored."""
    response = await api.post("/v1/schedules", json={**SCHEDULE, "cron": cron})
    assert response.status_code == 422, response.text
    assert [d["loc"][-1] for d in response.json()["error"]["details"]] == ["cron"]
    schedule_id = (await api.post("/v1/schedules", json=SCHEDULE)).json()["id"]
    edited = await api.patch(f"/v1/schedules/{schedule_id}", json={"cron": cron})
    assert edited.status_code == 422
    assert [d["loc"][-1] for d in edited.json()["error"]["details"]] == ["cron"]
    assert (await api.get(f"/v1/schedules/{schedule_id}")).json()["cron"] == SCHEDULE["cron"]
