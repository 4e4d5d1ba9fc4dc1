"""Test sends on the in-process api against the FCM emulator (OAuth on, Google's schema as its
oracle), with real nx-27017, RabbitMQ and Redis: exactly the named devices get the campaign's
message, each outcome is answered and recorded apart, unknown devices refuse the whole call,
and a configuration error of FCM is a clear 502, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fcm_emulator.client import EmulatorClient
from herald import names
from herald.adapters.mongo import Database
from herald.adapters.rate_limit import Budget
from herald.domain.access import Role
from services.api.auth import api_routes
from services.api.gate import budget_of
from tests.factories import CAMPAIGN_BODY
from tests.integration.helpers import client_of, mint
from tests.support import error_code

OPTIONS = {"priority": "high", "android_channel_id": "news", "sound": "default",
           "analytics_label": "launch"}


@pytest.fixture
async def devices(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    population = [{"token": f"tok-test-{i}", "platform": "android", "user_id": f"user-{i % 3}",
                   "topics": ["everyone"]} for i in range(6)]
    population.append({"token": "unregistered-tok-test", "platform": "ios", "user_id": "gone"})
    assert (await api.post("/v1/devices/bulk", json={"devices": population})).is_success
    return population


async def _campaign(api: httpx.AsyncClient, **body: Any) -> str:
    created = await api.post("/v1/campaigns", json={
        **CAMPAIGN_BODY, "audience": {"topics": ["nobody-has-this"]},
        "send_at": "2099-01-01T09:00:00Z", "options": OPTIONS, **body})
    assert created.status_code == 202, created.text
    return str(created.json()["id"])


async def test_only_the_named_devices_get_the_campaign_s_own_message(
        api: httpx.AsyncClient, api_app: FastAPI, devices: list[dict[str, Any]],
        emulator: EmulatorClient, db: Database) -> None:
    campaign_id = await _campaign(api, replace_key="launch-2099")
    operator = await mint(api, Role.OPERATOR, "marketing")
    async with client_of(api_app, operator) as client:
        response = await client.post(f"/v1/campaigns/{campaign_id}/test",
                                     json={"tokens": ["tok-test-1", "tok-test-4"]})
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["accepted"], result["failed"], result["status"]) == (2, 0, "scheduled")
    assert [o["token_suffix"] for o in result["outcomes"]] == ["k-test-1", "k-test-4"]
    received = emulator.received()
    assert sorted(r.token for r in received) == ["tok-test-1", "tok-test-4"]
    for request in received:
        assert request.violation is None and request.accepted
        assert (request.android_tag, request.android_collapse_key, request.apns_collapse_id,
                request.webpush_tag) == ("launch-2099",) * 4
        assert request.authorized_as is not None  # the senders' OAuth service account
    view = (await api.get(f"/v1/campaigns/{campaign_id}")).json()
    assert view["testable"] is True
    assert view["counts"] == {"targeted": 0, "sent": 0, "failed": 0, "unsent": 0,
                              "maybe_delivered": 0, "suppressed": 0}
    assert await db[names.DELIVERIES].count_documents({}) == 0
    assert await db[names.CHUNKS].count_documents({}) == 0
    recorded = (await api.get(f"/v1/campaigns/{campaign_id}/tests")).json()["items"]
    assert [(r["by"]["name"], r["accepted"]) for r in recorded] == [("marketing", 2)]
    log = (await api.get("/v1/operator-log", params={"campaign_id": campaign_id})).json()
    assert log["items"][0]["action"] == "campaign.test"


async def test_user_ids_reach_each_of_their_devices_and_fcm_s_answer_is_reported_not_acted_on(
        api: httpx.AsyncClient, devices: list[dict[str, Any]], emulator: EmulatorClient,
        db: Database) -> None:
    campaign_id = await _campaign(api)
    response = await api.post(f"/v1/campaigns/{campaign_id}/test",
                              json={"user_ids": ["user-0", "gone"]})
    assert response.status_code == 200, response.text
    outcomes = {o["token_suffix"]: o for o in response.json()["outcomes"]}
    assert sorted(r.token for r in emulator.received()) == [
        "tok-test-0", "tok-test-3", "unregistered-tok-test"]
    assert outcomes["tok-test"]["error"] == "UNREGISTERED"
    assert not outcomes["tok-test"]["accepted"]
    assert outcomes["k-test-0"]["accepted"] and outcomes["k-test-3"]["accepted"]
    retired = await db[names.DEVICES].count_documents({"invalid": True})
    assert retired == 0, "a test send retires no token"


async def test_unknown_devices_are_named_and_nothing_is_sent(
        api: httpx.AsyncClient, devices: list[dict[str, Any]], emulator: EmulatorClient,
        db: Database) -> None:
    campaign_id = await _campaign(api)
    unknown = await api.post(f"/v1/campaigns/{campaign_id}/test",
                             json={"tokens": ["tok-test-1", "never-registered"]})
    assert (unknown.status_code, error_code(unknown)) == (422, "unknown_devices")
    assert unknown.json()["error"]["details"][0]["unknown"] == ["never-registered"]
    nobody = await api.post(f"/v1/campaigns/{campaign_id}/test", json={"user_ids": ["who"]})
    assert (nobody.status_code, error_code(nobody)) == (422, "unknown_devices")
    too_many = await api.post(f"/v1/campaigns/{campaign_id}/test",
                              json={"tokens": [f"tok-{i}" for i in range(101)]})
    assert (too_many.status_code, error_code(too_many)) == (422, "validation_error")
    both = await api.post(f"/v1/campaigns/{campaign_id}/test",
                          json={"tokens": ["tok-test-1"], "user_ids": ["user-0"]})
    assert both.status_code == 422
    assert emulator.received() == []
    assert await db[names.TEST_SENDS].count_documents({}) == 0


async def test_more_than_100_devices_of_the_users_named_are_refused(
        api: httpx.AsyncClient, emulator: EmulatorClient) -> None:
    crowd = [{"token": f"tok-crowd-{i}", "platform": "web", "user_id": "crowd"}
             for i in range(101)]
    assert (await api.post("/v1/devices/bulk", json={"devices": crowd})).is_success
    campaign_id = await _campaign(api)
    refused = await api.post(f"/v1/campaigns/{campaign_id}/test", json={"user_ids": ["crowd"]})
    assert (refused.status_code, error_code(refused)) == (422, "too_many_devices")
    assert emulator.received() == []


async def test_a_configuration_error_of_fcm_is_a_clear_502(
        api: httpx.AsyncClient, devices: list[dict[str, Any]], emulator: EmulatorClient) -> None:
    campaign_id = await _campaign(api)
    emulator.configure(fail_all={"error": "PERMISSION_DENIED"})
    refused = await api.post(f"/v1/campaigns/{campaign_id}/test",
                             json={"tokens": ["tok-test-2"]})
    assert (refused.status_code, error_code(refused)) == (502, "fcm_misconfigured")
    assert "HERALD_FCM_PROJECT_ID" in refused.json()["error"]["message"]
    assert refused.json()["error"]["details"][0]["error"] == "PERMISSION_DENIED"


async def test_a_finished_or_stopping_campaign_cannot_be_test_sent(
        api: httpx.AsyncClient, devices: list[dict[str, Any]], emulator: EmulatorClient) -> None:
    campaign_id = await _campaign(api)
    assert (await api.post(f"/v1/campaigns/{campaign_id}/cancel")).status_code == 200
    refused = await api.post(f"/v1/campaigns/{campaign_id}/test",
                             json={"tokens": ["tok-test-2"]})
    assert (refused.status_code, error_code(refused)) == (409, "not_testable")
    missing = await api.post("/v1/campaigns/0123456789abcdef01234567/test",
                             json={"tokens": ["tok-test-2"]})
    assert (missing.status_code, error_code(missing)) == (404, "campaign_not_found")
    assert emulator.received() == []


def test_approvals_and_test_sends_spend_from_the_budget_of_changes(api_app: FastAPI) -> None:
    budgets = {route.path: budget_of(route) for route in api_routes(api_app.router.routes)}
    assert budgets["/v1/campaigns/{campaign_id}/test"] is Budget.WRITE
    assert budgets["/v1/campaigns/{campaign_id}/approve"] is Budget.WRITE
    assert budgets["/v1/campaigns/{campaign_id}/tests"] is Budget.READ
