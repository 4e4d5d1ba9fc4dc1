"""Issue 32, point 2 through the in-process api (nx-27017, Redis, a private vhost): a campaign's
own ``frequency_cap`` (``none`` or a lower cap) needs ``HERALD_FREQUENCY_CAP_ROLES`` and a
refused call changes nothing; a malformed cap, or one on a transactional campaign, is a 422;
suppressed recipients are counted apart in the view, listed in the audit with their rule, and
left out of a retarget or correction unless it asks for them."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.clock import utcnow
from herald.domain.access import Role
from herald.domain.frequency_cap import CapRule, CapWindow, send_key
from herald.names import RedisKeys
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import final_counts
from herald.settings import Settings
from tests.factories import at, begin_cancel, paged_campaign
from tests.integration.helpers import api_with, client_of, everything, mint
from tests.support import error_code

LATER = "2099-01-01T00:00:00Z"
CAPPED = "suppressed:frequency_cap"


@pytest.fixture
async def admins_only(broker_settings: Settings, admin_key: str, db: object,
                      redis: object) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An api where only admins give a campaign its own frequency cap; its admin."""
    async with api_with(broker_settings, admin_key, frequency_cap_roles="admin") as running:
        yield running


async def test_a_key_without_the_frequency_cap_scope_is_refused_and_nothing_changes(
        admins_only: tuple[FastAPI, httpx.AsyncClient]) -> None:
    app, admin = admins_only
    original = await admin.post("/v1/campaigns", json={
        "title": "Flash sale", "body": "Now", "frequency_cap": "none", "send_at": LATER})
    assert original.status_code == 202, original.text
    assert (await admin.get("/v1/me")).json()["frequency_cap"] is True
    before = await everything(admin)
    async with client_of(app, await mint(admin, Role.OPERATOR)) as operator:
        assert (await operator.get("/v1/me")).json()["frequency_cap"] is False
        refused = [
            await operator.post("/v1/campaigns", json={
                "title": "Sale", "body": "Today", "frequency_cap": "1/1h", "send_at": LATER}),
            await operator.post("/v1/schedules", json={
                "cron": "0 9 * * MON", "timezone": "Europe/Paris",
                "template": {"title": "t", "body": "b", "frequency_cap": "none"}}),
            # a follow-up inherits its original's cap, under the same scope
            await operator.post(f"/v1/campaigns/{original.json()['id']}/retarget", json={}),
        ]
        assert [(r.status_code, error_code(r)) for r in refused] == [
            (403, "frequency_cap_not_allowed")] * 3
        plain = await operator.post("/v1/campaigns", json={
            "title": "Sale", "body": "Today", "send_at": LATER})
        assert plain.status_code == 202, plain.text
    campaigns, schedules = await everything(admin)
    assert (campaigns[1:], schedules) == before


async def test_a_campaigns_own_cap_is_read_shown_and_refused_where_it_cannot_apply(
        api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/campaigns", json={
        "title": "Sale", "body": "Today", "frequency_cap": " 1/1h , 2/7d", "send_at": LATER})
    assert made.status_code == 202, made.text
    view = (await api.get(f"/v1/campaigns/{made.json()['id']}")).json()
    assert view["frequency_cap"] == "1/1h,2/7d"
    assert view["counts"]["suppressed"] == 0
    before = (await api.get("/v1/campaigns")).json()["items"]
    malformed = await api.post("/v1/campaigns", json={
        "title": "Sale", "body": "Today", "frequency_cap": "3/24x", "send_at": LATER})
    transactional = await api.post("/v1/campaigns", json={
        "title": "Receipt", "body": "Paid", "purpose": "transactional", "frequency_cap": "none",
        "send_at": LATER})
    assert malformed.status_code == transactional.status_code == 422
    assert "'3/24x' is not a window" in malformed.text
    assert "a transactional campaign is never capped" in transactional.text
    assert (await api.get("/v1/campaigns")).json()["items"] == before


async def _with_suppressed(stores: Stores) -> str:
    """``paged_campaign`` (12 sent, 1 failed) with 4 of its last chunk suppressed by the cap,
    then cancelled: 13 unsent, final counts exact."""
    campaign_id = await paged_campaign(stores)
    await stores.deliveries.record(campaign_id, 2, "s1",
                                   at((p, CAPPED) for p in range(4)), utcnow())
    await begin_cancel(stores, campaign_id)
    paged = await stores.campaigns.get(campaign_id)
    assert paged is not None
    assert await stores.campaigns.confirm_cancel(
        campaign_id, (await final_counts(stores, paged)).counts, utcnow()) is not None
    return campaign_id


async def test_the_suppressed_are_counted_apart_and_audited_with_their_rule(
        api: httpx.AsyncClient, stores: Stores) -> None:
    campaign_id = await _with_suppressed(stores)
    view = (await api.get(f"/v1/campaigns/{campaign_id}")).json()
    assert view["counts"] | {"maybe_delivered": 0} == {
        "targeted": 30, "sent": 12, "failed": 1, "unsent": 13, "suppressed": 4,
        "maybe_delivered": 0}
    url = f"/v1/campaigns/{campaign_id}/recipients"
    lines = [orjson.loads(line) for line in
             (await api.get(url, params={"outcome": "suppressed"})).content.splitlines()]
    assert lines == [{"token": f"tok-000{20 + i}", "user_id": f"u{20 + i}",
                      "outcome": "suppressed", "error": None, "variant": "default",
                      "rule": "frequency_cap"} for i in range(4)]
    rows = list(csv.DictReader(io.StringIO(
        (await api.get(url, params={"outcome": "suppressed", "format": "csv"})).text)))
    assert [(r["outcome"], r["error"], r["rule"]) for r in rows] == [
        ("suppressed", "", "frequency_cap")] * 4
    unsent = (await api.get(url, params={"outcome": "unsent"})).content.splitlines()
    assert len(unsent) == 13


async def test_a_retarget_leaves_the_suppressed_out_unless_it_asks_for_them(
        api: httpx.AsyncClient, stores: Stores) -> None:
    campaign_id = await _with_suppressed(stores)
    plain = await api.post(f"/v1/campaigns/{campaign_id}/retarget", json={})
    asked = await api.post(f"/v1/campaigns/{campaign_id}/retarget",
                           json={"include_suppressed": True})
    assert (plain.status_code, asked.status_code) == (202, 202)
    assert plain.json()["languages"] == {"default": 13}
    assert asked.json()["languages"] == {"default": 17}
    corrected = await api.post(f"/v1/campaigns/{campaign_id}/correct",
                               json={"include_suppressed": True, "body": "Fixed"})
    assert corrected.status_code == 202, corrected.text
    assert corrected.json()["retarget"]["expected"] == 17
    assert corrected.json()["amend"]["expected"] == 12
    before = (await api.get("/v1/campaigns")).json()["items"]
    amend = await api.post(f"/v1/campaigns/{campaign_id}/amend",
                           json={"include_suppressed": True})
    assert amend.status_code == 422 and "retarget it instead" in amend.text
    assert (await api.get("/v1/campaigns")).json()["items"] == before


async def test_erasing_a_person_forgets_what_the_cap_counted_for_them(
        api: httpx.AsyncClient, redis: Any, settings: Settings) -> None:
    caps = RedisFrequencyCaps(redis, RedisKeys(settings.mongodb_database))
    a = "a" * 24
    for person in ("u:dana", "u:eve"):
        await caps.admit(a, CapRule((CapWindow(3_600, 1),), 3_600),
                         {person: [send_key(a, 0, 0)]})
    erased = await api.delete("/v1/users/dana")
    assert erased.status_code == 200, erased.text
    assert await redis.exists(caps.key("u:dana")) == 0
    assert await redis.exists(caps.key("u:eve")) == 1
