"""Issue 30 end to end on the shared fleet (api, dispatcher, two senders), judged by the FCM
emulator's own record and the operator log:

- a rollout halted by its gate is resumed (the operator's override): the next wave goes out, the
  campaign completes exactly, nobody twice, and the gate does not halt it again on the same
  figures (before: paused again within 0.2 s, 104 of 4,800 sent after 90 s);
- 50 times (pause, resume) decided as fast as the API answers: exactly 50 pauses in the operator log
  (before: extra pauses decided by pods from late broadcasts), and the campaign sends on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import TERMINAL, Api, reachable_devices, requests_per_token
from tests.support import wait_for


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _refused_a_fifth(population: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """20% of the devices get a per-recipient error that says nothing of their token."""
    return [{**device, "token": f"unspecified-{device['token']}"} if i % 5 == 0 else device
            for i, device in enumerate(population)]


def _log(api: Api, campaign_id: str) -> Counter[str]:
    items = api.http.get("/v1/operator-log", params={"campaign_id": campaign_id,
                                                      "limit": 200}).json()["items"]
    return Counter(entry["action"] for entry in items)


def test_a_rollout_halted_by_its_gate_resumes_and_completes_exactly(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population, audience = fleet.import_own(api, _refused_a_fifth(reachable_devices(4_800)))
    campaign_id = api.create_campaign(audience=audience, rollout={
        "waves": [{"percent": 2, "hold_s": 5}, {"percent": 100}],
        "halt_when": {"failure_rate_above": 0.05, "min_attempts": 50}})
    halted = api.wait_until(campaign_id, {"paused"}, timeout_s=30)
    assert halted["pause"]["kind"] == "gate"
    gate = halted["rollout"]["gate"]
    assert gate["waves"] and gate["waves"][0]["attempted"] == gate["attempted"] > 0
    wait_for(lambda: api.campaign(campaign_id)["pause"]["settled_at"], 10, "the pause to settle")
    resumed = api.http.post(f"/v1/campaigns/{campaign_id}/resume")
    assert resumed.status_code == 200, resumed.text
    finished = api.wait_finished(campaign_id, timeout_s=60)
    counts = finished["counts"]
    print(f"halted at {gate['failed']} of {gate['attempted']}; then {counts}")
    assert finished["status"] in ("completed", "failed")  # failed: retryable errors, reported
    assert counts["sent"] + counts["failed"] == counts["targeted"] == len(population)
    assert finished["rollout"]["gate"]["judged_since"] is not None
    assert set(requests_per_token(emulator).values()) == {1}, "nobody twice"
    assert _log(api, campaign_id)["campaign.halt"] == 1
    sent = set(api.audit_tokens(campaign_id, "sent"))
    accepted = {r.token for r in emulator.received() if r.accepted}
    assert sent == accepted and len(sent) == counts["sent"]


def test_fifty_pauses_and_resumes_are_fifty_pauses_and_the_campaign_sends_on(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, reachable_devices(6_000))
    campaign_id = api.create_campaign(audience=audience, rate_per_s=150)  # 40 s of sending
    wait_for(lambda: len(emulator.received()) >= 200, 30, "the campaign to be sending")
    try:
        for _ in range(50):
            paused = api.http.post(f"/v1/campaigns/{campaign_id}/pause", json={"reason": "p"})
            assert paused.status_code in (200, 202), paused.text
            resumed = api.http.post(f"/v1/campaigns/{campaign_id}/resume")
            assert resumed.status_code == 200, resumed.text
        before = len(emulator.received())
        wait_for(lambda: len(emulator.received()) >= before + 400, 30, "sending to go on")
        campaign = api.campaign(campaign_id)
        logged = _log(api, campaign_id)
        print(f"after 50 pauses and resumes: {campaign['status']}, operator log {logged}")
        assert campaign["status"] == "in_progress"
        assert (logged["campaign.pause"], logged["campaign.resume"]) == (50, 50)
    finally:
        if api.campaign(campaign_id)["status"] not in TERMINAL:
            api.http.post(f"/v1/campaigns/{campaign_id}/cancel", json={"reason": "test over"})
    done = api.wait_finished(campaign_id, timeout_s=30)
    assert set(requests_per_token(emulator).values()) == {1}, "nobody twice"
    counts = done["counts"]
    assert counts["sent"] + counts["failed"] + counts["unsent"] == counts["targeted"]
