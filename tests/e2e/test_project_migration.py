"""Issue 30, point 7, end to end on the shared fleet: a project migration that left 30% of the
tokens in the old Firebase project (the FCM emulator answers ``SENDER_ID_MISMATCH`` to tokens
named ``mismatch-...``) never stops a campaign, even in a staged rollout whose first wave is 2%
of the audience (a few dozen answers per sender): every recipient is attempted once, the
mismatched fail alone, and their tokens are excluded from later audiences."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

POPULATION = 5_000
OLD_PROJECT = 0.3


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _migrated(population: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Three devices in ten still hold a token of the old project."""
    return [{**device, "token": f"mismatch-{device['token']}"} if i % 10 < 3 else device
            for i, device in enumerate(population)]


def _estimate(api: Api, audience: dict[str, Any]) -> int:
    response = api.http.post("/v1/audiences/estimate", json={"audience": audience})
    response.raise_for_status()
    return int(response.json()["devices"])


def test_30_percent_of_old_project_tokens_in_a_2_percent_wave_never_stop_the_campaign(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, _migrated(reachable_devices(POPULATION)))
    old = {d["token"] for d in devices if d["token"].startswith("mismatch-")}
    assert len(old) == OLD_PROJECT * POPULATION
    campaign_id = api.create_campaign(audience=audience, rollout={
        "waves": [{"percent": 2, "hold_s": 1}, {"percent": 100}]})

    def holding() -> dict[str, Any] | None:
        campaign = api.campaign(campaign_id)
        rollout = campaign["rollout"]
        finished = campaign["status"] not in ("pending", "in_progress")  # not claimed yet: wait
        return campaign if finished or rollout["holding"] else None
    held = wait_for(holding, 30, "wave 1 to be sent and held")
    assert held["status"] == "in_progress", held.get("error")
    first_wave = emulator.received()
    mismatched = sum(r.error == "SENDER_ID_MISMATCH" for r in first_wave)
    print(f"wave 1: {len(first_wave)} requests, {mismatched} of them SENDER_ID_MISMATCH")
    assert 50 <= len(first_wave) <= 150 and mismatched > 0

    campaign = api.wait_finished(campaign_id, timeout_s=60)
    assert campaign["status"] == "completed", campaign.get("error")
    assert campaign["counts"] == {"targeted": POPULATION, "sent": POPULATION - len(old),
                                  "failed": len(old), "unsent": 0, "maybe_delivered": 0,
                                  "suppressed": 0}
    per_token = Counter(r.token for r in emulator.received())
    assert set(per_token) == {d["token"] for d in devices} and set(per_token.values()) == {1}
    assert {line["error"] for line in api.audit(campaign_id, "failed")} == {"SENDER_ID_MISMATCH"}
    assert _estimate(api, audience) == POPULATION - len(old), "the old tokens are retired"
