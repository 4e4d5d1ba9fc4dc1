"""Issue 32, points 3 and 5 end to end, on the shared fleet (api, dispatcher, two senders, the
FCM emulator): quiet hours in each device's own time zone, asserted from the emulator's own
record.

200 devices: half in Seoul, half in London (nine hours behind). Each campaign brings its own
window, computed from the current time on Seoul's clock (the fleet runs without
``HERALD_QUIET_HOURS``, so no other module's campaigns are held): from an hour ago to a few
seconds ahead. Seoul is inside it, London is not.

- ``hold``: London is sent at once, Seoul not before the window ends there, then all of it;
  the campaign shows when its last recipient will be reached meanwhile; exact counts.
- ``skip``: London is sent, Seoul recorded ``suppressed`` with the rule ``quiet_hours``
  (audit and metric), nothing sent to it.
- a cancel while Seoul is held: Seoul becomes unsent.
- the estimate asked before each send says what the send then does.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, pod_metric, reachable_devices
from tests.support import wait_for

SEOUL = ZoneInfo("Asia/Seoul")
HALF = 100
AHEAD_S = 8
"""Seconds from the test's start to the end of the window in Seoul: time enough for the
outside half to be sent (and checked) while the inside half is held."""


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def window(ahead_s: float) -> tuple[str, float]:
    """A window from an hour ago to ``ahead_s`` from now on Seoul's clock; when it ends (epoch
    seconds, rounded down to its whole second as the window is written)."""
    now = datetime.now(SEOUL).replace(microsecond=0)
    end = now + timedelta(seconds=ahead_s)
    return f"{now - timedelta(hours=1):%H:%M:%S}-{end:%H:%M:%S}", end.timestamp()


def population(fleet: Fleet, api: Api) -> tuple[dict[str, Any], set[str], set[str]]:
    """The test's 200 devices: its audience, the Seoul tokens, the London tokens."""
    devices = [{**device, "timezone": "Asia/Seoul" if i < HALF else "Europe/London"}
               for i, device in enumerate(reachable_devices(2 * HALF))]
    own, audience = fleet.import_own(api, devices)
    seoul = {d["token"] for d in own if d["timezone"] == "Asia/Seoul"}
    return audience, seoul, {d["token"] for d in own} - seoul


def estimate(api: Api, audience: dict[str, Any], quiet_hours: dict[str, str]) -> dict[str, Any]:
    answer = api.http.post("/v1/audiences/estimate", json={
        "audience": audience, "quiet_hours": quiet_hours})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def counts(campaign: dict[str, Any]) -> dict[str, int]:
    figures = campaign["counts"]
    assert sum(figures[k] for k in ("sent", "failed", "unsent", "suppressed")) == \
        figures["targeted"]
    return {k: figures[k] for k in ("targeted", "sent", "failed", "unsent", "suppressed")}


def received(emulator: EmulatorClient, tokens: set[str]) -> dict[str, float]:
    """When each of ``tokens`` was first received by the emulator."""
    first: dict[str, float] = {}
    for request in emulator.received():
        if request.token in tokens:
            first[request.token] = min(first.get(request.token, request.received_at),
                                       request.received_at)
    return first


def test_a_held_half_is_sent_when_the_window_ends_in_its_own_time_zone(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    audience, seoul, london = population(fleet, api)
    quiet, ends_at = window(AHEAD_S)
    forecast = estimate(api, audience, {"window": quiet})
    assert forecast["devices"] == 2 * HALF
    assert forecast["held_back"]["quiet_hours_held"] == HALF
    assert forecast["held_back"]["quiet_hours_skipped"] == 0
    until = datetime.fromisoformat(forecast["quiet_hours_until"]).timestamp()
    assert until == ends_at
    assert forecast["finishes_in_s"] >= ends_at - time.time() - 1

    campaign_id = api.create_campaign(audience=audience, quiet_hours={"window": quiet})
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] == HALF, AHEAD_S,
             "the half outside the window to be sent")
    held = api.campaign(campaign_id)
    assert time.time() < ends_at, "the machine was too slow to see the hold: raise AHEAD_S"
    assert set(received(emulator, seoul | london)) == london
    assert held["status"] == "in_progress"
    assert datetime.fromisoformat(held["quiet_hours_until"]).timestamp() == ends_at
    assert [(w["zones"], w["held"]) for w in held["waves"]] == [
        (["Europe/London", "UTC"], False), (["Asia/Seoul"], True)]  # UTC: no timezone
    assert held["eta"] is None or datetime.fromisoformat(
        held["eta"]["finishes_at"]).timestamp() >= ends_at - 1

    done = api.wait_finished(campaign_id, timeout_s=60)
    assert done["status"] == "completed"
    assert counts(done) == {"targeted": 2 * HALF, "sent": 2 * HALF, "failed": 0, "unsent": 0,
                            "suppressed": 0}
    first = received(emulator, seoul | london)
    assert set(first) == seoul | london
    assert min(first[token] for token in seoul) >= ends_at
    assert Counter(r.token for r in emulator.received() if r.token in seoul | london) == \
        Counter(seoul | london)  # each once


def test_a_skipping_campaign_suppresses_the_half_inside_the_window(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    audience, seoul, london = population(fleet, api)
    quiet, _ = window(600)
    asked = {"window": quiet, "mode": "skip"}
    forecast = estimate(api, audience, asked)
    assert forecast["held_back"]["quiet_hours_skipped"] == HALF
    assert forecast["held_back"]["quiet_hours_held"] == 0
    assert forecast["quiet_hours_until"] is None
    before = pod_metric(api, "sender", "herald_recipients_suppressed_total", rule="quiet_hours")

    campaign_id = api.create_campaign(audience=audience, quiet_hours=asked)
    done = api.wait_finished(campaign_id, timeout_s=60)
    assert done["status"] == "completed"
    assert counts(done) == {"targeted": 2 * HALF, "sent": HALF, "failed": 0, "unsent": 0,
                            "suppressed": forecast["held_back"]["quiet_hours_skipped"]}
    assert set(received(emulator, seoul | london)) == london
    audit = api.audit(campaign_id, "suppressed")
    assert {line["token"] for line in audit} == seoul
    assert {(line["rule"], line["error"]) for line in audit} == {("quiet_hours", None)}
    assert pod_metric(api, "sender", "herald_recipients_suppressed_total",
                      rule="quiet_hours") - before == HALF


def test_a_cancel_while_a_half_is_held_leaves_it_unsent(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    audience, seoul, london = population(fleet, api)
    quiet, _ = window(3600)
    campaign_id = api.create_campaign(audience=audience, quiet_hours={"window": quiet})
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] == HALF, 30,
             "the half outside the window to be sent")
    cancel = api.http.post(f"/v1/campaigns/{campaign_id}/cancel")
    assert cancel.status_code in (200, 202), cancel.text
    cancelled = api.wait_until(campaign_id, {"cancelled"}, timeout_s=30)
    assert counts(cancelled) == {"targeted": 2 * HALF, "sent": HALF, "failed": 0,
                                 "unsent": HALF, "suppressed": 0}
    assert set(api.audit_tokens(campaign_id, "unsent")) == seoul
    assert set(received(emulator, seoul | london)) == london
