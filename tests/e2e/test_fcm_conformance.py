"""Issue 20's conformance tier, part one: Herald against the strict FCM emulator (Google's
discovery document, Google's error shapes, OAuth on), one test per fault, on the shared fleet
(api, dispatcher, two senders).

What Google says each answer means (the ErrorCode reference) decides what must happen: a token
is retired only when FCM says the token is bad; an error about the request, the credentials or
the project stops the campaign within the requests already on the wire, retires nothing, and
says why; a 401 is answered with a new token; a request FCM did not answer is recorded as
"may have been delivered" and never sent again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald_cli import commands as cli
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, pod_metric, reachable_devices
from tests.support import wait_for

pytestmark = pytest.mark.conformance

SENDERS = 2
CONNECTIONS = 256
"""``HERALD_SENDER_CONCURRENCY``: the window of requests one sender may have on the wire."""
GOOGLE_SAYS = {
    "INVALID_PAYLOAD": "Message is too big",
    "PERMISSION_DENIED": "Permission 'cloudmessaging.messages.create' denied",
    "THIRD_PARTY_AUTH_ERROR": "Auth error from APNS or Web Push Service",
    "NOT_FOUND": "Requested entity was not found.",
}


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def estimate(api: Api, audience: dict[str, Any]) -> int:
    response = api.http.post("/v1/audiences/estimate", json={"audience": audience})
    response.raise_for_status()
    return int(response.json()["devices"])


def received_by(emulator: EmulatorClient, tokens: set[str]) -> list[Received]:
    return [row for row in emulator.received() if row.token in tokens]


def authorized(rows: list[Received]) -> list[Received]:
    """The requests FCM answered as itself, not refused for their OAuth token (the fleet's
    emulator forgets its tokens between tests: the senders' first requests meet a 401)."""
    return [row for row in rows if row.auth_error is None]


def error_lines(stack: Stack, campaign_id: str) -> list[str]:
    """ERROR lines about ``campaign_id`` in every sender's log."""
    lines = []
    for name, process in stack.processes.items():
        if name.startswith("sender"):
            lines += [line for line in process.log_path.read_text(errors="replace").splitlines()
                      if " ERROR " in line and campaign_id in line]
    return lines


# --- a configuration error stops the campaign, not the audience -----------------------------------
@pytest.mark.parametrize("fault", sorted(GOOGLE_SAYS))
def test_a_configuration_error_stops_the_campaign_and_retires_no_token(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient, fault: str) -> None:
    devices, audience = fleet.import_own(api, reachable_devices(3_000))
    tokens = {device["token"] for device in devices}
    stopped_before = pod_metric(api, "sender", "herald_campaigns_stopped_total", code=fault)
    emulator.configure(latency_ms=20, fail_all={"error": fault})
    campaign_id = api.create_campaign(audience=audience)
    campaign = api.wait_finished(campaign_id)

    assert campaign["status"] == "failed"
    assert fault in campaign["error"] and GOOGLE_SAYS[fault] in campaign["error"]
    assert campaign["cancel"]["requested_by"]["kind"] == "system"
    requests = authorized(received_by(emulator, tokens))
    assert 0 < len(requests) <= SENDERS * CONNECTIONS  # one window per sender, no more
    counts = campaign["counts"]
    assert counts == {"targeted": 3_000, "sent": 0, "failed": len(requests),
                      "unsent": 3_000 - len(requests), "maybe_delivered": 0, "suppressed": 0}
    failed = api.audit(campaign_id, "failed")
    assert sorted(line["token"] for line in failed) == sorted(r.token for r in requests)
    assert {line["error"] for line in failed} == {fault}
    assert estimate(api, audience) == 3_000, "a configuration error retired tokens"
    assert len(error_lines(stack, campaign_id)) == 1
    assert pod_metric(api, "sender", "herald_campaigns_stopped_total",
                      code=fault) > stopped_before
    watched = CliRunner().invoke(cli.app, ["campaigns", "watch", campaign_id, "--api",
                                           str(api.http.base_url)],
                                 env={"HERALD_API_KEY": stack.config.api_key})
    assert watched.exit_code == 0 and f"reason: FCM refused the campaign: {fault}" in watched.output

    emulator.configure(latency_ms=0, fail_all=None)  # fixed: a retry sends to everyone left
    retried = api.http.post(f"/v1/campaigns/{campaign_id}/retry")
    assert retried.status_code == 202, retried.text
    follow_up = api.wait_finished(retried.json()["id"])
    assert follow_up["status"] == "completed"
    assert follow_up["counts"]["sent"] == 3_000
    delivered = Counter(r.token for r in received_by(emulator, tokens) if r.accepted)
    assert set(delivered) == tokens and set(delivered.values()) == {1}


def test_permission_denied_is_a_configuration_error_not_a_sender_id_mismatch(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, reachable_devices(600))
    emulator.configure(fail_all={"error": "PERMISSION_DENIED"})
    campaign = api.wait_finished(api.create_campaign(audience=audience))
    assert campaign["status"] == "failed" and "PERMISSION_DENIED" in campaign["error"]
    errors = {line["error"] for line in api.audit(campaign["id"], "failed")}
    assert errors == {"PERMISSION_DENIED"}
    assert estimate(api, audience) == 600


# --- tokens of another project ---------------------------------------------------------------------
def test_a_few_tokens_of_another_project_are_excluded_from_later_audiences(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population = reachable_devices(300)
    for device in population[:10]:
        device["token"] = "mismatch-" + device["token"]
    _, audience = fleet.import_own(api, population)
    campaign = api.wait_finished(api.create_campaign(audience=audience))
    assert campaign["status"] == "completed"  # their own token's fault: nothing to retry
    assert campaign["counts"]["failed"] == 10
    assert {line["error"] for line in api.audit(campaign["id"], "failed")} == \
        {"SENDER_ID_MISMATCH"}
    assert estimate(api, audience) == 290


def test_every_token_of_another_project_means_the_credentials_are_wrong(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, reachable_devices(2_000))
    emulator.configure(latency_ms=20, fail_all={"error": "SENDER_ID_MISMATCH"})
    campaign = api.wait_finished(api.create_campaign(audience=audience))
    assert campaign["status"] == "failed" and "another Firebase project" in campaign["error"]
    assert estimate(api, audience) == 2_000, "a wrong project retired the audience"


# --- OAuth: a 401 is answered with a new token ----------------------------------------------------
def test_a_token_revoked_mid_campaign_is_replaced_and_no_recipient_fails(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, reachable_devices(4_000))
    tokens = {device["token"] for device in devices}
    emulator.configure(latency_ms=20)
    campaign_id = api.create_campaign(audience=audience, rate_per_s=1_000)
    wait_for(lambda: len(received_by(emulator, tokens)) >= 1_000, 30, "1,000 requests")
    granted_before = sum(emulator.stats()["grants"].values())
    emulator.configure(revoke_tokens=True)
    campaign = api.wait_finished(campaign_id)

    assert campaign["status"] == "completed", campaign
    assert campaign["counts"]["sent"] == 4_000 and campaign["counts"]["failed"] == 0
    rows = received_by(emulator, tokens)
    assert any(row.auth_error == "revoked" for row in rows), "no request met the revocation"
    assert sum(emulator.stats()["grants"].values()) > granted_before
    delivered = Counter(row.token for row in rows if row.accepted)
    assert set(delivered) == tokens and set(delivered.values()) == {1}


# --- a request FCM did not answer may have been delivered -----------------------------------------
def test_a_request_without_an_answer_is_recorded_as_maybe_delivered_and_never_resent(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population = reachable_devices(20)
    for device in population[:10]:
        device["token"] = "stall-" + device["token"]
    devices, audience = fleet.import_own(api, population)
    stalled = {device["token"] for device in devices[:10]}
    emulator.configure(stall_ms=11_000)  # the senders give up after HERALD_FCM_TIMEOUT_S (10 s)
    campaign = api.wait_finished(api.create_campaign(audience=audience), timeout_s=90)

    assert campaign["status"] == "failed" and "may have been delivered" in campaign["error"]
    assert campaign["counts"]["maybe_delivered"] == 10
    failed = api.audit(campaign["id"], "failed")
    assert {line["token"] for line in failed} == stalled
    assert {line["error"] for line in failed} == {"TIMEOUT"}
    sent_to = Counter(row.token for row in authorized(received_by(emulator, stalled)))
    assert set(sent_to) == stalled and set(sent_to.values()) == {1}, "a stalled request was resent"


# --- platform options, as Google describes them ---------------------------------------------------
EVERY_OPTION = {"ttl_s": 600, "priority": "high", "android_channel_id": "live", "sound": "default",
                "badge": 1, "analytics_label": "live-2026-11",
                "click": {"android": "OPEN_LIVE", "ios": "LIVE", "web": "https://example.com/l"}}


def test_every_option_is_sent_as_google_describes_it_and_a_follow_up_may_change_them(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, reachable_devices(200))
    tokens = {device["token"] for device in devices}
    campaign = api.wait_finished(api.create_campaign(audience=audience, options=EVERY_OPTION))
    assert campaign["status"] == "completed" and campaign["options"]["ttl_s"] == 600
    amended = api.http.post(f"/v1/campaigns/{campaign['id']}/amend",
                            json={"body": "Now with sound off", "options": {"ttl_s": 0}})
    assert amended.status_code == 202, amended.text
    amend = api.wait_finished(amended.json()["id"])
    assert amend["status"] == "completed" and amend["options"] == {
        "ttl_s": 0, "priority": None, "android_channel_id": None, "sound": None, "badge": None,
        "click": None, "analytics_label": None}
    rows = authorized(received_by(emulator, tokens))
    assert len(rows) == 400 and all(row.accepted and row.violation is None for row in rows)
