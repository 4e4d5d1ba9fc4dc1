"""Issue 24's rate changed mid-flight: ``PATCH /v1/campaigns/{id}`` with ``rate_per_s`` while the
campaign sends takes effect across the fleet (two senders) within a second, down and up, as the
FCM emulator's own record of request times measures it."""

from __future__ import annotations

import time

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

POPULATION = 14_000
"""Enough to still be sending at 2,000/s when the last measurement ends."""
START, DOWN, UP = 1_000, 300, 2_000
"""Messages a second: at creation, after the first PATCH, after the second."""
MEASURED_S = 2.0
TOLERANCE = 0.3
"""A loose floor for a loaded 2-core machine (the measured figures are in docs/measurements.md)."""


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _rate(times: list[float], start: float, end: float) -> float:
    return sum(start <= t < end for t in times) / (end - start)


def _patch(api: Api, campaign_id: str, rate_per_s: int) -> float:
    response = api.http.patch(f"/v1/campaigns/{campaign_id}", json={"rate_per_s": rate_per_s})
    returned_at = time.time()
    assert response.status_code == 200, response.text
    assert response.json()["rate_per_s"] == rate_per_s
    return returned_at


def _near(measured: float, wanted: int) -> bool:
    return (1 - TOLERANCE) * wanted <= measured <= (1 + TOLERANCE) * wanted


def test_a_rate_changed_mid_flight_holds_across_the_fleet_within_a_second(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    _, audience = fleet.import_own(api, reachable_devices(POPULATION))
    campaign_id = api.create_campaign(audience=audience, rate_per_s=START)
    # past the first second, whose burst (a full bucket: one second's worth) is not the rate
    wait_for(lambda: len(emulator.received()) >= 2_600, 30, "the campaign to be sending")
    # Each rate is measured over the two seconds after the first: senders take tokens in
    # blocks (up to 64 each), and one block more or less in a single second is 40% of 300/s.
    time.sleep(MEASURED_S)  # the rate at creation, over as long a stretch as the others
    down_at = _patch(api, campaign_id, DOWN)
    time.sleep(1.0 + MEASURED_S)
    up_at = _patch(api, campaign_id, UP)
    time.sleep(1.0 + MEASURED_S)
    times = [r.received_at for r in emulator.received()]
    before = _rate(times, down_at - MEASURED_S, down_at)
    after_down = _rate(times, down_at + 1.0, down_at + 1.0 + MEASURED_S)
    after_up = _rate(times, up_at + 1.0, up_at + 1.0 + MEASURED_S)
    print(f"measured: {before:.0f}/s before, {after_down:.0f}/s from 1 s after the change to "
          f"{DOWN}, {after_up:.0f}/s from 1 s after the change to {UP}")
    assert _near(before, START), before
    assert _near(after_down, DOWN), after_down
    assert _near(after_up, UP), after_up
    finished = api.wait_finished(campaign_id, timeout_s=30)
    assert finished["counts"]["sent"] == POPULATION
