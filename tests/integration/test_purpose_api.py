"""Issue 32, point 1 through the in-process api (nx-27017, Redis, a private vhost): a campaign's
purpose (marketing by default, transactional for the roles of ``HERALD_TRANSACTIONAL_ROLES``)
is shown in its view and the operator log, narrows the estimate like the campaign, and a
refused call changes nothing; a campaign stored before purposes reads ``purpose: null``; the
estimate says how many devices the marketing opt-out holds back (point 5)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from herald import names
from herald.adapters.mongo import Database
from herald.domain.access import Role
from herald.settings import Settings
from tests.integration.helpers import api_with, client_of, everything, mint
from tests.support import error_code

LATER = "2099-01-01T00:00:00Z"
TOPIC = "purpose-estimate"


@pytest.mark.parametrize(("role", "purposes"), [
    (Role.ADMIN, ["marketing", "transactional"]), (Role.OPERATOR, ["marketing", "transactional"]),
    (Role.RESPONDER, []), (Role.VIEWER, [])])
async def test_me_says_which_purposes_a_key_may_send_with(
        api: httpx.AsyncClient, api_app: FastAPI, role: Role, purposes: list[str]) -> None:
    async with client_of(api_app, await mint(api, role)) as caller:
        assert (await caller.get("/v1/me")).json()["purposes"] == purposes


@pytest.fixture
async def admins_only(broker_settings: Settings, admin_key: str, db: object,
                      redis: object) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An api where only admins give transactional campaigns; its admin."""
    async with api_with(broker_settings, admin_key, transactional_roles="admin") as running:
        yield running
    """An api where only admins send transactional campaigns; its admin."""

async def test_a_key_without_the_transactional_scope_is_refused_and_nothing_changes(
        admins_only: tuple[FastAPI, httpx.AsyncClient]) -> None:
    app, admin = admins_only
    original = await admin.post("/v1/campaigns", json={
        "title": "Receipt", "body": "Paid", "purpose": "transactional", "send_at": LATER})
    assert original.status_code == 202, original.text
    before = await everything(admin)
    async with client_of(app, await mint(admin, Role.OPERATOR)) as operator:
        assert (await operator.get("/v1/me")).json()["purposes"] == ["marketing"]
        refused = [
            await operator.post("/v1/campaigns", json={
                "title": "Receipt", "body": "Paid", "purpose": "transactional",
                "send_at": LATER}),
            await operator.post("/v1/schedules", json={
                "cron": "0 9 * * MON", "timezone": "Europe/Paris",
                "template": {"title": "t", "body": "b", "purpose": "transactional"}}),
            # a follow-up inherits its original's purpose, under the same scope
            await operator.post(f"/v1/campaigns/{original.json()['id']}/retarget", json={}),
        ]
        assert [(r.status_code, error_code(r)) for r in refused] == [
            (403, "purpose_not_allowed")] * 3
        marketing = await operator.post("/v1/campaigns", json={
            "title": "Sale", "body": "Today", "send_at": LATER})
        assert marketing.status_code == 202, marketing.text
    campaigns, schedules = await everything(admin)
    assert (campaigns[1:], schedules) == before


async def test_the_purpose_is_in_the_view_the_list_and_the_operator_log(
        api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/campaigns", json={"title": "Sale", "body": "Today",
                                                 "send_at": LATER})
    assert made.status_code == 202, made.text
    campaign_id = made.json()["id"]
    assert (await api.get(f"/v1/campaigns/{campaign_id}")).json()["purpose"] == "marketing"
    listed = (await api.get("/v1/campaigns")).json()["items"]
    assert [c["purpose"] for c in listed if c["id"] == campaign_id] == ["marketing"]
    log = (await api.get("/v1/operator-log", params={"campaign_id": campaign_id})).json()
    assert [(e["action"], e["detail"]) for e in log["items"]] == [
        ("campaign.create", "lane=standard purpose=marketing")]


async def test_a_marketing_audience_of_opted_out_devices_is_a_422_naming_the_field(
        api: httpx.AsyncClient) -> None:
    refused = await api.post("/v1/campaigns", json={
        "title": "Sale", "body": "Today", "audience": {"marketing_enabled": False}})
    assert refused.status_code == 422
    assert "audience.marketing_enabled" in refused.text
    assert (await api.get("/v1/campaigns")).json()["items"] == []


NO_OTHER_RULE = {"frequency_cap": 0, "quiet_hours_held": 0, "quiet_hours_skipped": 0}
"""No cap nor quiet hours in force here."""


async def test_the_estimate_counts_the_devices_the_purpose_reaches(
        api: httpx.AsyncClient) -> None:
    devices = [{"token": f"purpose-{push}-{marketing}", "platform": "android",
                "push_enabled": push, "marketing_enabled": marketing, "topics": [TOPIC]}
               for push in (True, False) for marketing in (True, False)]
    assert (await api.post("/v1/devices/bulk", json={"devices": devices})).status_code == 200
    audience = {"topics": [TOPIC], "push_enabled": None}
    answers = {purpose: (await api.post("/v1/audiences/estimate", json={
        "audience": audience, "purpose": purpose})).json()
        for purpose in ("marketing", "transactional")}
    assert {p: (a["devices"], a["held_back"]) for p, a in answers.items()} == {
        "marketing": (1, {"marketing_opt_out": 1, **NO_OTHER_RULE}),  # push on, not opted in
        "transactional": (2, {})}                   # push disabled is no rule's: nobody's
    default = await api.post("/v1/audiences/estimate", json={"audience": audience})
    assert default.json()["devices"] == 1
    opted_in = await api.post("/v1/audiences/estimate", json={
        "audience": {**audience, "marketing_enabled": True}})
    assert (opted_in.json()["devices"], opted_in.json()["held_back"]) == (
        1, {"marketing_opt_out": 0, **NO_OTHER_RULE})  # the audience asked for the opted in


async def test_a_campaign_stored_before_purposes_reads_purpose_null(
        api: httpx.AsyncClient, db: Database) -> None:
    made = await api.post("/v1/campaigns", json={"title": "Old", "body": "one",
                                                 "send_at": LATER})
    campaign_id = made.json()["id"]
    await db[names.CAMPAIGNS].update_many({}, {"$unset": {"purpose": ""}})
    assert (await api.get(f"/v1/campaigns/{campaign_id}")).json()["purpose"] is None
