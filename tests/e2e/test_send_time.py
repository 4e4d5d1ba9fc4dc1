"""Issue 30, point 5, end to end on the shared fleet: a campaign with a TTL paused longer than its
TTL, then resumed, sends no request whose APNs expiry is already past, judged from the FCM
emulator's own record of the request bodies.

The issue's case is ``ttl_s`` 30 paused 40 s (564 of 564 requests after the resume expired). The
test proves the same with ``ttl_s`` 3 paused 4 s, a pause longer than the TTL as there: a sender
that dated the expiry when it first compiled the campaign (before the pause) would send every
request after the resume expired; one that dates each request when it starts sends each with at
least its TTL, less the second the expiry is rounded to, ahead of it (less the time from its
start to the emulator: on a loaded machine, with the modules two at a time, the least was 0.97 s
of 3 on 2026-11-27; an expiry dated before the pause would be at least a second past)."""

from __future__ import annotations

import time

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

TTL_S = 3
PAUSED_S = TTL_S + 1
POPULATION = 2_000


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def test_no_request_after_a_resume_carries_an_expiry_already_past(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    emulator.configure(keep_bodies=True)
    _, audience = fleet.import_own(api, reachable_devices(POPULATION))
    campaign_id = api.create_campaign(audience=audience, rate_per_s=500,
                                      options={"ttl_s": TTL_S})
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 200, 60,
             "the campaign to be sending")
    paused = api.http.post(f"/v1/campaigns/{campaign_id}/pause")
    assert paused.status_code == 202, paused.text
    wait_for(lambda: api.campaign(campaign_id)["pause"]["settled_at"], 10,
             "every pod to acknowledge the pause")
    time.sleep(PAUSED_S)  # the pause itself: longer than the TTL
    resumed_at = time.time()
    resumed = api.http.post(f"/v1/campaigns/{campaign_id}/resume")
    assert resumed.status_code == 200, resumed.text
    assert api.http.patch(f"/v1/campaigns/{campaign_id}",
                          json={"rate_per_s": 50_000}).status_code == 200
    assert api.wait_finished(campaign_id)["counts"]["sent"] == POPULATION

    after = [r for r in emulator.received() if r.received_at >= resumed_at]
    assert len(after) >= POPULATION // 4, "a good part of the campaign is sent after the resume"
    slack_s = [int(r.body["message"]["apns"]["headers"]["apns-expiration"]) - r.received_at
               for r in after]
    print(f"{len(after)} requests after the resume; their expiry {min(slack_s):.2f} to "
          f"{max(slack_s):.2f} s after their arrival (TTL {TTL_S} s)")
    assert min(slack_s) > 0.0, "no expiry past, each counted from its own request"
