"""Inputs that cannot hurt the api (issue 31, point 3), on the in-process api with real stores
behind it: a template too deep or too long is a 422 naming its field on every route that takes
content, never a 500; a body over what its route can need is a 413 before it is read; a 60 KB
locale is refused at registration; the largest campaign is accepted, its checks off the loop."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Awaitable, Callable

import httpx
import orjson
import pytest
from fastapi import FastAPI

from herald import names
from herald.adapters.mongo import Database
from herald.contracts.sizes import CAMPAIGN_BODY_MAX_BYTES
from herald.service_layer.ports import Stores
from tests.factories import CAMPAIGN_BODY, cancelled_paged_campaign, largest_campaign
from tests.support import error_code

NESTED_100 = "{{ " + "(" * 100 + "user_id" + ")" * 100 + " }}"
LONG = '{{ attributes.x | default("' + "y" * 300 + '") }}'
LATER = "2099-01-01T00:00:00Z"

Route = Callable[[httpx.AsyncClient, Stores, str], Awaitable[httpx.Response]]


async def _create(api: httpx.AsyncClient, _: Stores, text: str) -> httpx.Response:
    return await api.post("/v1/campaigns", json={**CAMPAIGN_BODY, "data": {"landingUrl": text}})


async def _translation(api: httpx.AsyncClient, _: Stores, text: str) -> httpx.Response:
    return await api.post("/v1/campaigns", json={
        **CAMPAIGN_BODY, "translations": {"es": {"title": "Hola", "body": text}}})


async def _preview(api: httpx.AsyncClient, _: Stores, text: str) -> httpx.Response:
    return await api.post("/v1/campaigns/preview", json={
        "content": {**CAMPAIGN_BODY, "data": {"landingUrl": text}}, "token": "tok-1"})


async def _schedule(api: httpx.AsyncClient, _: Stores, text: str) -> httpx.Response:
    return await api.post("/v1/schedules", json={
        "template": {**CAMPAIGN_BODY, "data": {"landingUrl": text}}, "cron": "0 9 * * MON",
        "timezone": "UTC"})


async def _patch(api: httpx.AsyncClient, _: Stores, text: str) -> httpx.Response:
    created = await api.post("/v1/campaigns", json={**CAMPAIGN_BODY, "send_at": LATER})
    assert created.status_code == 202, created.text
    return await api.patch(f"/v1/campaigns/{created.json()['id']}",
                           json={"data": {"landingUrl": text}})


async def _retarget(api: httpx.AsyncClient, stores: Stores, text: str) -> httpx.Response:
    original = await cancelled_paged_campaign(stores)
    return await api.post(f"/v1/campaigns/{original.id}/retarget",
                          json={"data": {"landingUrl": text}})


ROUTES: dict[str, Route] = {"create": _create, "translation": _translation,
                            "preview": _preview, "schedule": _schedule, "patch": _patch,
                            "retarget": _retarget}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("text", "says"), [
    (NESTED_100, "brackets nest more than 4 deep"),
    (LONG, "a placeholder is at most 256 characters"),
    ("{{ platform }}" * 51, "51 placeholders"),
])
async def test_a_template_too_deep_or_too_long_is_a_422_naming_its_field(
        api: httpx.AsyncClient, stores: Stores, db: Database, route: str, text: str,
        says: str) -> None:
    before = await db[names.CAMPAIGNS].count_documents({})
    response = await ROUTES[route](api, stores, text)
    assert (response.status_code, error_code(response)) == (422, "invalid_template"), \
        response.text
    details = response.json()["error"]["details"]
    assert says in details[0]["msg"]
    assert details[0]["field"] in ("data.landingUrl", "translations.es.body")
    created_by_the_route = 1 if route in ("patch", "retarget") else 0
    assert await db[names.CAMPAIGNS].count_documents({}) == before + created_by_the_route


async def test_a_campaign_body_over_what_a_campaign_can_need_is_413_unread(
        api: httpx.AsyncClient, db: Database) -> None:
    too_large = b'{"title": "t", "body": "' + b"x" * CAMPAIGN_BODY_MAX_BYTES + b'"}'
    response = await api.post("/v1/campaigns", content=too_large,
                              headers={"Content-Type": "application/json"})
    assert (response.status_code, error_code(response)) == (413, "request_too_large")
    assert f"limited to {CAMPAIGN_BODY_MAX_BYTES} bytes" in response.json()["error"]["message"]
    assert await db[names.CAMPAIGNS].count_documents({}) == 0


async def test_a_device_import_may_still_be_larger_than_a_campaign(
        api: httpx.AsyncClient, db: Database) -> None:
    devices = [{"token": f"t{i:05d}-" + "x" * 4000, "platform": "ios"} for i in range(1200)]
    body = orjson.dumps({"devices": devices})
    assert len(body) > CAMPAIGN_BODY_MAX_BYTES
    response = await api.post("/v1/devices/bulk", content=body,
                              headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert await db[names.DEVICES].count_documents({}) == 1200


async def test_the_openapi_document_names_each_routes_body_limit(
        api: httpx.AsyncClient, api_app: FastAPI) -> None:
    paths = (await api.get("/openapi.json")).json()["paths"]
    limit = "x-herald-max-body-bytes"
    assert paths["/v1/campaigns"]["post"][limit] == CAMPAIGN_BODY_MAX_BYTES
    assert paths["/v1/schedules"]["post"][limit] == CAMPAIGN_BODY_MAX_BYTES
    assert paths["/v1/devices/bulk"]["post"][limit] == \
        api_app.state.services.settings.api_max_body_bytes
    assert limit not in paths["/v1/campaigns"]["get"]


async def test_a_60_kb_locale_is_refused_at_registration(api: httpx.AsyncClient,
                                                         db: Database) -> None:
    device = {"token": "tok-long-locale", "platform": "android",
              "locale": "es-" + "-".join(["abcdefgh"] * 6666)}
    response = await api.post("/v1/devices", json=device)
    assert (response.status_code, error_code(response)) == (422, "validation_error")
    assert "at most 35 characters" in response.json()["error"]["message"]
    assert len(response.content) < 2000  # the locale is not echoed back
    assert await db[names.DEVICES].count_documents({}) == 0


async def test_the_largest_campaign_is_accepted_and_checked_off_the_event_loop(
        api: httpx.AsyncClient) -> None:
    """While its 5,050 placeholders are checked (each in the costliest shape), the loop goes
    on: a tick every 10 ms is late by a few switch intervals of the interpreter's lock (the
    worker thread holds it 5 ms at a time), never by the whole check (2 s, and 5 s for a
    400 KB preview before issue 31). The machine's load decides the worst tick: the figure
    is printed, and the bound is loose; ``tests/e2e/test_inputs.py`` times a cancel."""
    late_ms: list[float] = []

    async def ticking(until: asyncio.Event) -> None:
        while not until.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            late_ms.append((time.perf_counter() - started - 0.01) * 1000)

    body = orjson.dumps(largest_campaign(placeholders=True))
    gc.collect()
    gc.freeze()  # as the api's process does once started (herald.runtime.heap.settle_heap)
    done = asyncio.Event()
    ticker = asyncio.create_task(ticking(done))
    started = time.perf_counter()
    response = await api.post("/v1/campaigns", content=body,
                              headers={"Content-Type": "application/json"})
    took_s = time.perf_counter() - started
    done.set()
    await ticker
    gc.unfreeze()
    assert response.status_code == 202, response.text[:500]
    late_ms.sort()
    median, worst = late_ms[len(late_ms) // 2], late_ms[-1]
    print(f"\nthe largest create: {took_s:.2f} s; the loop late by {median:.0f} ms (median), "
          f"{worst:.0f} ms at most, {len(late_ms)} ticks; load {os.getloadavg()[0]:.1f}")
    assert median < 20
    assert worst < 0.5 * took_s * 1000

