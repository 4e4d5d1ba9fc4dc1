"""Issue 2's proof: api, dispatcher and two senders as separate processes (the session's
shared fleet), 6,000 devices, and the FCM emulator's own record as the judge."""

from __future__ import annotations

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, accepted, dead, devices, requests_per_token


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def test_every_targeted_device_gets_exactly_one_message_and_the_audit_agrees(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population, audience = fleet.import_own(api, devices(6_000))
    targeted = {d["token"] for d in population if d["push_enabled"]}
    refused = {t for t in targeted if dead(t)}

    campaign_id = api.create_campaign(data={"landingUrl": "https://example.com/live"},
                                      audience=audience)
    campaign = api.wait_finished(campaign_id)

    per_token = requests_per_token(emulator)
    assert campaign["status"] == "completed"
    assert set(per_token) == targeted, "a targeted device was missed or another device was sent"
    assert set(per_token.values()) == {1}, "some device got more than one request"
    assert campaign["counts"] == {"targeted": len(targeted), "sent": len(targeted - refused),
                                  "failed": len(refused), "unsent": 0, "maybe_delivered": 0,
                                  "suppressed": 0}
    assert sorted(api.audit_tokens(campaign_id, "sent")) == sorted(accepted(emulator.received()))
    assert set(api.audit_tokens(campaign_id, "failed")) == refused
    assert api.audit_tokens(campaign_id, "unsent") == []
    errors = {line["error"] for line in api.audit(campaign_id, "failed")}
    assert errors == {"UNREGISTERED", "INVALID_ARGUMENT"}


def test_tokens_fcm_refused_are_never_targeted_again(stack: Stack, fleet: Fleet, api: Api,
                                                     emulator: EmulatorClient) -> None:
    population, audience = fleet.import_own(api, devices(2_000))
    first = api.wait_finished(api.create_campaign(audience=audience))
    emulator.reset()
    second_id = api.create_campaign(audience=audience)
    second = api.wait_finished(second_id)
    live = {d["token"] for d in population if d["push_enabled"] and not dead(d["token"])}
    assert first["counts"]["failed"] > 0
    assert second["counts"] == {"targeted": len(live), "sent": len(live), "failed": 0, "unsent": 0,
                                "maybe_delivered": 0, "suppressed": 0}
    assert set(requests_per_token(emulator)) == live
