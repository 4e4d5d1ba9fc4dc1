"""Issue 32, point 1 end to end, on the shared fleet (api, dispatcher, two senders) with the FCM
emulator: a marketing campaign (the default) reaches none of the devices that opted out of
marketing, whatever its audience says; a transactional one reaches them, never a device with
push disabled. Asserted from the emulator's own record of the tokens it received."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def population() -> list[dict[str, Any]]:
    """40 devices: every other one opted out of marketing, every fourth with push disabled."""
    return [{**device, "marketing_enabled": i % 2 == 0, "push_enabled": i % 4 != 3}
            for i, device in enumerate(reachable_devices(40))]


def tokens_where(devices: list[dict[str, Any]], **flags: bool) -> set[str]:
    return {d["token"] for d in devices
            if all(d[name] is value for name, value in flags.items())}


def received(emulator: EmulatorClient, tokens: set[str]) -> set[str]:
    return {r.token for r in emulator.received() if r.token in tokens}


def test_marketing_reaches_none_of_the_opted_out_and_transactional_reaches_them(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, population())
    everyone = {d["token"] for d in devices}
    opted_in = tokens_where(devices, marketing_enabled=True, push_enabled=True)
    push_enabled = tokens_where(devices, push_enabled=True)

    marketing = api.create_campaign(audience={**audience, "push_enabled": None})
    done = api.wait_finished(marketing, timeout_s=30)
    assert (done["status"], done["purpose"], done["counts"]["sent"]) == (
        "completed", "marketing", len(opted_in))
    assert received(emulator, everyone) == opted_in

    transactional = api.create_campaign(audience={**audience, "push_enabled": None},
                                        purpose="transactional")
    done = api.wait_finished(transactional, timeout_s=30)
    assert (done["status"], done["purpose"], done["counts"]["sent"]) == (
        "completed", "transactional", len(push_enabled))
    tokens = [r.token for r in emulator.received() if r.token in everyone]
    assert set(tokens) == push_enabled  # the opted-out ones now too, never push disabled
    assert len(tokens) == len(opted_in) + len(push_enabled)


def test_a_marketing_audience_of_opted_out_devices_is_refused_and_sends_nothing(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, population())
    refused = api.http.post("/v1/campaigns", json={
        "title": "Sale", "body": "Today", "audience": {**audience, "marketing_enabled": False}})
    assert refused.status_code == 422
    assert "audience.marketing_enabled" in refused.text
    estimate = api.http.post("/v1/audiences/estimate", json={
        "audience": {**audience, "marketing_enabled": False}, "purpose": "transactional"})
    assert estimate.json()["devices"] == len(
        tokens_where(devices, marketing_enabled=False, push_enabled=True))
    assert received(emulator, {d["token"] for d in devices}) == set()
