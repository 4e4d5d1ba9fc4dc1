"""Issue 29, point 3 through the in-process api (nx-27017, Redis, a private vhost): the lane is
shown wherever a campaign is — its view, the operator log's entry of the call that made it, a
schedule's template — and ``/v1/me`` says which lanes a key may send in, as
``HERALD_URGENT_ROLES`` decides."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from herald.domain.access import Role
from herald.settings import Settings
from services.api.app import create_app
from tests.integration.helpers import client_of, mint
from tests.support import error_code

ALL_LANES = ["urgent", "standard", "bulk"]


@pytest.mark.parametrize(("role", "lanes"), [
    (Role.ADMIN, ALL_LANES), (Role.OPERATOR, ALL_LANES), (Role.RESPONDER, []),
    (Role.VIEWER, [])])
async def test_me_says_which_lanes_a_key_may_send_in(api: httpx.AsyncClient, api_app: FastAPI,
                                                     role: Role, lanes: list[str]) -> None:
    async with client_of(api_app, await mint(api, role)) as caller:
        assert (await caller.get("/v1/me")).json()["lanes"] == lanes


@pytest.fixture
async def admins_only(broker_settings: Settings, admin_key: str, db: object,
                      redis: object) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An api where only admins may send urgent (``HERALD_URGENT_ROLES=admin``); its admin."""
    app = create_app(broker_settings.model_copy(update={
        "bootstrap_api_key": SecretStr(admin_key), "urgent_roles": "admin"}))
    async with app.router.lifespan_context(app), client_of(app, admin_key) as client:
        yield app, client


async def test_where_only_admins_send_urgent_an_operator_is_offered_the_other_two(
        admins_only: tuple[FastAPI, httpx.AsyncClient]) -> None:
    app, admin = admins_only
    async with client_of(app, await mint(admin, Role.OPERATOR)) as operator:
        assert (await operator.get("/v1/me")).json()["lanes"] == ["standard", "bulk"]
        refused = await operator.post("/v1/campaigns", json={
            "title": "Outage", "body": "We are on it", "lane": "urgent",
            "send_at": "2099-01-01T00:00:00Z"})
        assert (refused.status_code, error_code(refused)) == (403, "lane_not_allowed")
    assert (await admin.get("/v1/me")).json()["lanes"] == ALL_LANES


async def test_the_lane_is_in_the_view_and_in_the_operator_logs_entry_of_the_create(
        api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/campaigns", json={
        "title": "Outage", "body": "We are on it", "lane": "urgent",
        "send_at": "2099-01-01T00:00:00Z"})
    assert made.status_code == 202, made.text
    campaign_id = made.json()["id"]
    view = (await api.get(f"/v1/campaigns/{campaign_id}")).json()
    assert (view["lane"], view["first_request_at"]) == ("urgent", None)
    listed = (await api.get("/v1/campaigns")).json()["items"]
    assert [c["lane"] for c in listed if c["id"] == campaign_id] == ["urgent"]
    log = (await api.get("/v1/operator-log", params={"campaign_id": campaign_id})).json()
    assert [(e["action"], e["detail"]) for e in log["items"]] == [
        ("campaign.create", "lane=urgent purpose=marketing")]


async def test_a_schedules_template_shows_its_lane_standard_when_none_was_named(
        api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/schedules", json={
        "cron": "0 9 * * MON", "timezone": "Europe/Paris",
        "template": {"title": "Digest", "body": "This week"}})
    assert made.status_code == 201, made.text
    schedule = made.json()
    assert schedule["template"]["lane"] == "standard"
    edited = await api.patch(f"/v1/schedules/{schedule['id']}", json={
        "template": {"title": "Digest", "body": "This week", "lane": "bulk"}})
    assert edited.json()["template"]["lane"] == "bulk"
    unnamed = await api.patch(f"/v1/schedules/{schedule['id']}", json={
        "template": {"title": "Digest", "body": "Next week"}})
    assert unnamed.json()["template"]["lane"] == "standard"  # what its runs will take
    log = (await api.get("/v1/operator-log")).json()["items"]
    assert ("schedule.create", "lane=standard purpose=marketing") in [
        (e["action"], e["detail"]) for e in log]
