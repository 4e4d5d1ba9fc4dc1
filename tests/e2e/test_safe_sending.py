"""Issue 24's approval and test send with the services as separate processes, on the shared
fleet: a second api replica started with ``HERALD_APPROVAL_MIN_AUDIENCE`` (the setting is the
api's and the scheduler's; the fleet's dispatcher and senders are unchanged) takes the calls.

A large campaign waits: its creator cannot approve it and FCM receives nothing of it but a test
send to two named devices; a second key approves it (with the CLI) and the senders send it to
its audience; the test-sent devices got the same message from both (the emulator's record of
each request's replacement fields and credentials), and the campaign's numbers and audit count
only the real send."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from devstack.processes import free_port
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald_cli import commands as cli
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices

POPULATION = 40
MIN_AUDIENCE = 10
QUIET_S = 1.5
"""How long nothing may reach FCM before the approval: six dispatcher sweeps (0.25 s each)."""


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def approving_api(stack: Stack) -> Iterator[Api]:
    """A second api replica with approvals on (``Fleet.heal`` stops it after the test)."""
    port = free_port()
    stack.start_service("api", "api-approval", HERALD_API_PORT=str(port),
                        HERALD_APPROVAL_MIN_AUDIENCE=str(MIN_AUDIENCE))
    client = Api(f"http://127.0.0.1:{port}", stack.config.api_key)
    yield client
    client.http.close()


def _fields(request: Received) -> tuple[object, ...]:
    return (request.android_tag, request.android_collapse_key, request.apns_collapse_id,
            request.webpush_topic, request.webpush_tag, request.violation,
            request.authorized_as)


def test_a_large_campaign_is_sent_only_once_another_key_approves_it(
        fleet: Fleet, approving_api: Api, emulator: EmulatorClient) -> None:
    own, audience = fleet.import_own(approving_api, reachable_devices(POPULATION))
    marketing_key = approving_api.mint_key("operator", "marketing", owner="marketing")
    marketing = approving_api.as_key(marketing_key)
    try:
        _approved_after_a_test_send(approving_api, marketing, marketing_key, own, audience,
                                    emulator)
    finally:
        marketing.http.close()


def _approved_after_a_test_send(approving_api: Api, marketing: Api, marketing_key: str,
                                own: list[dict[str, Any]], audience: dict[str, Any],
                                emulator: EmulatorClient) -> None:
    reviewer_key = approving_api.mint_key("operator", "reviewer", owner="reviewer")
    campaign_id = marketing.create_campaign(
        audience=audience, data={"landingUrl": "https://example.com/live"},
        options={"priority": "high", "android_channel_id": "live"})
    assert marketing.campaign(campaign_id)["status"] == "awaiting_approval"

    tested = [own[3]["token"], own[7]["token"]]
    where = ["--api", str(approving_api.http.base_url), "--api-key", marketing_key]
    unknown = CliRunner().invoke(cli.app, ["test", campaign_id, *where, "--token", tested[0],
                                           "--token", "never-registered"])
    assert unknown.exit_code == 1 and "unknown_devices" in unknown.output
    too_many = marketing.http.post(f"/v1/campaigns/{campaign_id}/test",
                                   json={"tokens": [d["token"] for d in own] * 3})
    assert too_many.status_code == 422  # 120 tokens: over 100, nothing sent
    test = CliRunner().invoke(cli.app, ["test", campaign_id, *where,
                                        *(arg for t in tested for arg in ("--token", t))])
    assert test.exit_code == 0, test.output
    assert "2 accepted, 0 refused" in test.output
    own_approval = marketing.http.post(f"/v1/campaigns/{campaign_id}/approve", json={
        "digest": marketing.campaign(campaign_id)["content_digest"]})
    assert own_approval.status_code == 403
    assert own_approval.json()["error"]["code"] == "self_approval"
    time.sleep(QUIET_S)
    assert sorted(r.token for r in emulator.received()) == sorted(tested), \
        "FCM received something of an unapproved campaign besides the test send"
    assert marketing.campaign(campaign_id)["status"] == "awaiting_approval"

    approved = CliRunner().invoke(cli.app, ["approve", campaign_id, "--yes", "--api",
                                            str(approving_api.http.base_url),
                                            "--api-key", reviewer_key])
    assert approved.exit_code == 0, approved.output
    assert "approved by reviewer" in approved.output
    finished = marketing.wait_finished(campaign_id, timeout_s=60)
    assert finished["status"] == "completed"
    assert finished["approval"]["by"]["name"] == "reviewer"
    assert finished["counts"]["sent"] == POPULATION  # the test send is not counted
    assert sorted(marketing.audit_tokens(campaign_id, "sent")) == sorted(d["token"] for d in own)

    by_token: dict[str, list[Received]] = {}
    for request in emulator.received():
        by_token.setdefault(request.token, []).append(request)
    assert {token: len(requests) for token, requests in by_token.items()} == {
        d["token"]: 2 if d["token"] in tested else 1 for d in own}
    for token in tested:
        test_sent, sent = sorted(by_token[token], key=lambda r: r.received_at)
        assert _fields(test_sent) == _fields(sent)
        assert test_sent.accepted and sent.accepted


def test_test_sends_stay_tests(fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    """Issue 31 point 2: a campaign's test sends reach at most 25 distinct devices in all, a
    device named twice or with push disabled is refused, and nothing of a refused call is
    sent; FCM's own record says so."""
    own, audience = fleet.import_own(api, reachable_devices(30))
    disabled, _ = fleet.import_own(api, [{**reachable_devices(1)[0], "push_enabled": False}])
    campaign_id = api.create_campaign(audience=audience, send_at="2099-01-01T00:00:00Z")
    tokens = [d["token"] for d in own]

    def test(named: list[str]) -> int:
        return api.http.post(f"/v1/campaigns/{campaign_id}/test",
                             json={"tokens": named}).status_code

    assert test([tokens[0]] * 2) == 422, "a device twice in one call"
    assert test(tokens[:20]) == 200
    assert test(tokens[15:25]) == 200  # 25 distinct in all: the bound
    assert test(tokens[25:26]) == 422, "a 26th distinct device"
    refused = api.http.post(f"/v1/campaigns/{campaign_id}/test",
                            json={"tokens": [tokens[0], disabled[0]["token"]]})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "push_disabled"
    received = Counter(r.token for r in emulator.received())
    assert set(received) == set(tokens[:25]) and sum(received.values()) == 30
    api.http.post(f"/v1/campaigns/{campaign_id}/cancel", json={"reason": "test over"})
