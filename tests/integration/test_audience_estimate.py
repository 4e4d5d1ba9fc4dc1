"""``POST /v1/audiences/estimate`` on the in-process api (real MongoDB wire server behind it): the
count of devices a campaign to that audience would target, when it would be done, and a bad
filter refused; a sending campaign's ``eta``."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.adapters.redis import RedisPodRegistry
from herald.clock import utcnow
from herald.domain.access import Role
from herald.domain.documents import CampaignCounts, Dispatch
from herald.domain.pods import PodBeat
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.service_layer.ports import Stores
from herald.settings import Settings
from tests.factories import campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code

DEVICES = [{**device, "marketing_enabled": True} for device in [  # estimates are marketing
    {"token": "a-1", "platform": "android", "topics": ["news"], "attributes": {"age": 20}},
    {"token": "a-2", "platform": "android", "push_enabled": False},
    {"token": "i-1", "platform": "ios", "topics": ["news", "sport"], "attributes": {"age": 40}},
    {"token": "w-1", "platform": "web", "locale": "ko-KR", "attributes": {"age": 60}},
]]


async def estimate(client: httpx.AsyncClient, audience: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/audiences/estimate", json={"audience": audience})


@pytest.fixture
async def registered(api: httpx.AsyncClient) -> httpx.AsyncClient:
    assert (await api.post("/v1/devices/bulk", json={"devices": DEVICES})).status_code == 200
    return api


@pytest.mark.parametrize(("audience", "devices"), [
    ({}, 3),
    ({"push_enabled": None}, 3),  # no purpose reaches a device with push disabled
    ({"platforms": ["android", "ios"]}, 2),
    ({"topics": ["news"]}, 2),
    ({"attributes": {"age": {"gte": 30}}}, 2),
    ({"locales": ["ko-KR"], "platforms": ["web"]}, 1),
    ({"user_ids": ["nobody"]}, 0),
])
async def test_the_estimate_counts_the_devices_a_campaign_would_target(
        registered: httpx.AsyncClient, audience: dict[str, Any], devices: int) -> None:
    response = await estimate(registered, audience)
    assert response.status_code == 200
    assert (response.json()["devices"], response.json()["by_language"]) == (devices, None)


SPLIT_DEVICES = [{"token": f"s-{i}", "platform": "android", "topics": ["split"],
                  "marketing_enabled": True, **locale}
                 for i, locale in enumerate([{"locale": "es-MX"}, {"locale": "es_mx"},
                                             {"locale": "es"}, {"locale": "es-AR"},
                                             {"locale": "pt-BR"}, {"locale": "fr"}, {}])]


async def test_given_a_campaigns_languages_the_estimate_splits_the_devices_by_variant(
        api: httpx.AsyncClient) -> None:
    assert (await api.post("/v1/devices/bulk", json={"devices": SPLIT_DEVICES})).status_code == 200
    response = await api.post("/v1/audiences/estimate", json={
        "audience": {"topics": ["split"]}, "languages": ["es-mx", "es", "pt"]})
    assert response.status_code == 200, response.text
    assert response.json()["devices"] == 7
    assert response.json()["by_language"] == {"es-MX": 2, "es": 2, "pt": 1, "default": 2}


async def test_a_language_that_is_not_a_tag_is_a_422(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/audiences/estimate", json={"languages": ["español"]})
    assert (response.status_code, error_code(response)) == (422, "validation_error")


@pytest.mark.parametrize("audience", [
    {"attributes": {"age": {"$gt": 3}}}, {"platforms": ["symbian"]}, {"surprise": 1},
    {"user_ids": {"$ne": None}},
])
async def test_a_bad_filter_is_a_422(api: httpx.AsyncClient, audience: dict[str, Any]) -> None:
    response = await estimate(api, audience)
    assert (response.status_code, error_code(response)) == (422, "validation_error")


async def test_a_viewer_may_estimate_a_device_key_may_not(api: httpx.AsyncClient,
                                                          api_app: FastAPI) -> None:
    viewer, ingest = await mint(api, Role.VIEWER), await mint(api, Role.INGEST)
    async with client_of(api_app, viewer) as reader, client_of(api_app, ingest) as devices, \
            client_of(api_app, None) as anonymous:
        assert (await estimate(reader, {})).status_code == 200
        assert (await estimate(devices, {})).status_code == 403
        assert (await estimate(anonymous, {})).status_code == 401


async def beat_as_sender(redis: Any, settings: Settings, pod_id: str) -> None:
    """A live sender, as its heartbeat says (the forecast counts live senders)."""
    registry = RedisPodRegistry(redis, RedisKeys(settings.mongodb_database), ttl_s=30)
    await registry.beat(PodBeat(id=pod_id, service="sender", host="test", pid=1, version="t",
                                started_at=0))


async def test_the_estimate_forecasts_when_a_campaign_would_be_done(
        registered: httpx.AsyncClient, redis: Any, broker_settings: Settings) -> None:
    """Issue 29, point 6: no sender alive, no forecast; then two live senders at the default
    1,000/s each (nothing measured yet), a cap, a lane and a rollout's hold."""
    alone = (await estimate(registered, {})).json()
    assert (alone["finishes_in_s"], alone["fleet_rate_measured"]) == (None, False)
    for pod_id in ("sender-a", "sender-b"):
        await beat_as_sender(redis, broker_settings, pod_id)
    await asyncio.sleep(1.1)  # the forecaster reads the fleet at most once a second
    answers = [(await registered.post("/v1/audiences/estimate", json=body)).json()
               for body in ({}, {"rate_per_s": 1}, {"lane": "bulk", "rate_per_s": 2},
                            {"rollout": {"waves": [{"percent": 50, "hold_s": 60},
                                                   {"percent": 100}]}})]
    assert [a["devices"] for a in answers] == [3] * 4
    assert [a["finishes_in_s"] for a in answers] == pytest.approx([3 / 2_000, 3, 1.5,
                                                                   60 + 3 / 2_000])
    assert answers[0]["fleet_rate_per_s"] == 2_000
    assert answers[0]["recipients_ahead"] == 0


@pytest.mark.parametrize("body", [
    {"lane": "vip"}, {"rate_per_s": 0}, {"rollout": {"waves": [{"percent": 50}]}},
    {"rollout": {"waves": []}}])
async def test_a_bad_forecast_input_is_a_422(api: httpx.AsyncClient, body: dict[str, Any]) -> None:
    response = await api.post("/v1/audiences/estimate", json=body)
    assert (response.status_code, error_code(response)) == (422, "validation_error")


async def test_a_sending_campaigns_get_has_its_eta_and_others_none(
        api: httpx.AsyncClient, stores: Stores, redis: Any, broker_settings: Settings) -> None:
    await beat_as_sender(redis, broker_settings, "sender-a")
    sending = campaign(status=Status.IN_PROGRESS, dispatch=Dispatch(owner="d", done=True),
                       counts=CampaignCounts(targeted=5_000, sent=1_000))
    paused = campaign(status=Status.PAUSED)
    for record in (sending, paused):
        await stores.campaigns.insert(record)
    view = (await api.get(f"/v1/campaigns/{sending.id}")).json()
    assert view["eta"]["finishes_in_s"] == pytest.approx(4, abs=0.01)
    finishes_at = datetime.fromisoformat(view["eta"]["finishes_at"])
    assert abs((finishes_at - utcnow()).total_seconds() - 4) < 2
    assert (await api.get(f"/v1/campaigns/{paused.id}")).json()["eta"] is None
    listed = (await api.get("/v1/campaigns")).json()["items"]
    assert {c["eta"] is None for c in listed} == {True}  # only the GET of one forecasts
