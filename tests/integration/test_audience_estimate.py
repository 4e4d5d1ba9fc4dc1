"""``POST /v1/audiences/estimate`` on the in-process api (real MongoDB wire server behind it): the
count of devices a campaign to that audience would target, and a bad filter refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.domain.access import Role
from tests.integration.helpers import client_of, mint
from tests.support import error_code

DEVICES = [
    {"token": "a-1", "platform": "android", "topics": ["news"], "attributes": {"age": 20}},
    {"token": "a-2", "platform": "android", "push_enabled": False},
    {"token": "i-1", "platform": "ios", "topics": ["news", "sport"], "attributes": {"age": 40}},
    {"token": "w-1", "platform": "web", "locale": "ko-KR", "attributes": {"age": 60}},
]


async def estimate(client: httpx.AsyncClient, audience: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/audiences/estimate", json={"audience": audience})


@pytest.fixture
async def registered(api: httpx.AsyncClient) -> httpx.AsyncClient:
    assert (await api.post("/v1/devices/bulk", json={"devices": DEVICES})).status_code == 200
    return api


@pytest.mark.parametrize(("audience", "devices"), [
    ({}, 3),
    ({"push_enabled": None}, 4),
    ({"platforms": ["android", "ios"]}, 2),
    ({"topics": ["news"]}, 2),
    ({"attributes": {"age": {"gte": 30}}}, 2),
    ({"locales": ["ko-KR"], "platforms": ["web"]}, 1),
    ({"user_ids": ["nobody"]}, 0),
])
async def test_the_estimate_counts_the_devices_a_campaign_would_target(
        registered: httpx.AsyncClient, audience: dict[str, Any], devices: int) -> None:
    response = await estimate(registered, audience)
    assert (response.status_code, response.json()) == (200, {"devices": devices,
                                                             "by_language": None})


SPLIT_DEVICES = [{"token": f"s-{i}", "platform": "android", "topics": ["split"], **locale}
                 for i, locale in enumerate([{"locale": "es-MX"}, {"locale": "es_mx"},
                                             {"locale": "es"}, {"locale": "es-AR"},
                                             {"locale": "pt-BR"}, {"locale": "fr"}, {}])]


async def test_given_a_campaigns_languages_the_estimate_splits_the_devices_by_variant(
        api: httpx.AsyncClient) -> None:
    assert (await api.post("/v1/devices/bulk", json={"devices": SPLIT_DEVICES})).status_code == 200
    response = await api.post("/v1/audiences/estimate", json={
        "audience": {"topics": ["split"]}, "languages": ["es-mx", "es", "pt"]})
    assert response.status_code == 200, response.text
    assert response.json() == {"devices": 7, "by_language": {
        "es-MX": 2, "es": 2, "pt": 1, "default": 2}}


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
