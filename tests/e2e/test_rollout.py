"""Issue 24's staged rollout, end to end on the shared fleet, judged by the FCM emulator's own
record: wave 1 of ``[1, 10, 100]`` reaches about 1% of the audience, spread over all of it, and
nothing more is sent during its hold; a rollout whose first wave meets a 30% failure rate halts
itself after that wave, paused with the gate's reason, and nothing beyond the wave is sent."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.domain.rollout import wave_bucket
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices, requests_per_token
from tests.support import wait_for

REASON = re.compile(r"failure rate (\d+(?:\.\d)?)% > 5% after wave 1: ([\d,]+) of ([\d,]+)")


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _holding(api: Api, campaign_id: str, wave: int) -> dict[str, Any]:
    def held() -> dict[str, Any] | None:
        campaign = api.campaign(campaign_id)
        rollout = campaign["rollout"]
        return campaign if rollout["wave"] == wave and rollout["holding"] else None
    return wait_for(held, 30, f"wave {wave} to be sent and held")


def test_wave_one_of_a_rollout_is_a_spread_percent_and_nothing_more_is_sent_during_its_hold(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population, audience = fleet.import_own(api, reachable_devices(10_000))
    campaign_id = api.create_campaign(audience=audience, rollout={
        "waves": [{"percent": 1, "hold_s": 2.5}, {"percent": 10, "hold_s": 0.5},
                  {"percent": 100}],
        "halt_when": {"failure_rate_above": 0.05, "min_attempts": 50}})
    held = _holding(api, campaign_id, 1)
    first = [r.token for r in emulator.received()]
    time.sleep(1.0)
    assert len(emulator.received()) == len(first), "nothing is sent during the hold"
    assert 50 <= len(first) <= 150, f"wave 1 reached {len(first)} of 10,000"
    assert held["rollout"]["gate"]["attempted"] == len(first)
    assert all(wave_bucket(campaign_id, token) < 1 for token in first)
    order = {device["token"]: i for i, device in enumerate(population)}
    quartiles = [order[token] * 4 // len(population) for token in first]
    assert all(quartiles.count(q) >= len(first) // 10 for q in range(4)), (
        f"wave 1 is not spread over the audience: {[quartiles.count(q) for q in range(4)]}")
    finished = api.wait_finished(campaign_id, timeout_s=60)
    assert finished["status"] == "completed"
    assert finished["counts"]["sent"] == 10_000
    assert set(requests_per_token(emulator).values()) == {1}
    assert finished["rollout"]["wave"] == 3


def _refused_by_a_third(population: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """30% of the devices get a per-recipient error that says nothing of their token."""
    return [{**device, "token": f"unspecified-{device['token']}"} if i % 10 < 3 else device
            for i, device in enumerate(population)]


def test_a_rollout_whose_first_wave_fails_too_often_halts_itself_after_it(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, _refused_by_a_third(reachable_devices(2_000)))
    campaign_id = api.create_campaign(audience=audience, rollout={
        "waves": [{"percent": 10, "hold_s": 30}, {"percent": 100}],
        "halt_when": {"failure_rate_above": 0.05, "min_attempts": 50}})
    halted = api.wait_until(campaign_id, {"paused"}, timeout_s=30)
    received = emulator.received()
    assert halted["pause"]["kind"] == "gate"
    match = REASON.fullmatch(halted["pause"]["reason"])
    assert match is not None, halted["pause"]["reason"]
    failed, attempted = (int(group.replace(",", "")) for group in match.group(2, 3))
    assert attempted == len(received), "every recipient the gate counted is in FCM's record"
    assert failed == sum(r.error == "UNSPECIFIED_ERROR" for r in received)
    assert 0.2 < failed / attempted < 0.4
    assert all(wave_bucket(campaign_id, r.token) < 10 for r in received), "nothing beyond wave 1"
    time.sleep(0.5)
    assert len(emulator.received()) == len(received)
    log = api.http.get("/v1/operator-log", params={"campaign_id": campaign_id}).json()["items"]
    assert "campaign.halt" in {entry["action"] for entry in log}
    wait_for(lambda: api.campaign(campaign_id)["pause"]["settled_at"], 10, "the pause to settle")
    cancelled = api.http.post(f"/v1/campaigns/{campaign_id}/cancel", json={"reason": "bad"})
    assert cancelled.status_code == 200, cancelled.text  # nothing in flight: cancelled at once
    counts = cancelled.json()["counts"]
    assert (counts["sent"] + counts["failed"], counts["targeted"]) == (attempted, 2_000)
