"""Issue 14's proof, with separate processes: a campaign stopped mid-flight, then corrected with
one command, leaves every targeted device with exactly one corrected notification, which on the
devices that had the broken one replaces it (same tag and collapse id).

The FCM emulator is slowed for the original so that the cancel lands mid-flight, and sped up
again for the follow-ups, which only need to run to the end."""

from __future__ import annotations

from collections import Counter

import pytest
from typer.testing import CliRunner

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald_cli import commands as cli
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, accepted, reachable_devices
from tests.support import wait_for

POPULATION = 10_000
SLOW_FCM_MS = 50
FIXED = "https://example.com/fixed"


def _sending(api: Api, campaign_id: str, at_least: int) -> bool:
    campaign = api.campaign(campaign_id)
    return bool(campaign["status"] == "in_progress" and campaign["counts"]["sent"] >= at_least)


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _cancelled_mid_flight(fleet: Fleet, api: Api, emulator: EmulatorClient) -> str:
    _, audience = fleet.import_own(api, reachable_devices(POPULATION))
    emulator.configure(latency_ms=SLOW_FCM_MS)
    campaign_id = api.create_campaign(data={"landingUrl": "https://example.com/broken"},
                                      audience=audience)
    wait_for(lambda: _sending(api, campaign_id, 2_000), 60, "the campaign to be sending")
    assert api.http.post(f"/v1/campaigns/{campaign_id}/cancel").status_code == 202
    api.wait_until(campaign_id, {"cancelled"}, timeout_s=15)
    return campaign_id


def _correct_with_the_cli(stack: Stack, campaign_id: str) -> dict[str, str]:
    """``herald campaigns correct``; the ids it prints, by half."""
    result = CliRunner().invoke(cli.app, [
        "campaigns", "correct", campaign_id, "--data", f"landingUrl={FIXED}",
        "--idempotency-key", "fix-1", "--api", stack.config.api_url,
        "--api-key", stack.config.api_key])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    return {words[0]: words[1] for words in lines if words and words[0] in ("retarget", "amend")}


def _replacement(received: Received) -> tuple[str | None, ...]:
    return (received.android_tag, received.android_collapse_key, received.apns_collapse_id,
            received.webpush_tag, received.webpush_topic)


def test_correct_after_a_cancel_leaves_everyone_one_corrected_notification(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    original_id = _cancelled_mid_flight(fleet, api, emulator)
    original_requests = emulator.received()
    had_original = set(accepted(original_requests))
    emulator.reset()
    emulator.configure(latency_ms=0)

    made = _correct_with_the_cli(stack, original_id)
    replayed = api.http.post(f"/v1/campaigns/{original_id}/correct",
                             json={"data": {"landingUrl": FIXED}},
                             headers={"Idempotency-Key": "fix-1"}).json()
    assert made == {half: replayed[half]["id"] for half in ("retarget", "amend")}
    retarget = api.wait_finished(made["retarget"], timeout_s=60)
    amend = api.wait_finished(made["amend"], timeout_s=60)
    original = api.campaign(original_id)
    corrections = emulator.received()

    per_device = Counter(r.token for r in corrections)
    sent, unsent = (set(api.audit_tokens(original_id, outcome)) for outcome in ("sent", "unsent"))
    assert sent == had_original and len(sent | unsent) == POPULATION
    assert set(per_device) == sent | unsent, "every targeted device got a correction"
    assert set(per_device.values()) == {1}, "nobody got two corrections"
    key = f"herald-{original_id}"
    first_seen = {r.token: _replacement(r) for r in original_requests if r.accepted}
    for received in corrections:
        assert received.accepted
        if received.token in sent:
            assert _replacement(received) == first_seen[received.token] == (key,) * 5
    assert (retarget["status"], amend["status"]) == ("completed", "completed")
    assert retarget["counts"]["targeted"] == retarget["counts"]["sent"] == len(unsent)
    assert amend["counts"]["targeted"] == amend["counts"]["sent"] == len(sent)
    assert (len(unsent), len(sent)) == (original["counts"]["unsent"], original["counts"]["sent"])
    assert (replayed["retarget"]["expected"], replayed["amend"]["expected"]) == (
        len(unsent), len(sent))
    assert set(api.audit_tokens(made["amend"], "sent")) == sent
    assert retarget["data"] == amend["data"] == {"landingUrl": FIXED}
    assert (amend["amends"], original["amended_by"]) == (original_id, [made["amend"]])
