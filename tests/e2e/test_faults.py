"""Issue 23's proof: the promises hold under the faults an SRE meets, every service a separate
process on the shared fleet (api, dispatcher, two senders; heartbeats every 0.5 s, dead after
1.5 s, sweeps every 0.25 s: ``E2E_ENV``).

- A sender the kernel stops (SIGSTOP) while its campaign is cancelled sends nothing after the
  cancel is confirmed, and once it runs again the audit, the final counts and FCM's own record
  agree.
- A stopped sender's chunks are taken over by heartbeat (not when RabbitMQ notices), and when it
  runs again it sends nothing already sent nor after completion.
- The database killed (kill -9) and restarted mid-campaign: finished within 30 s of its return,
  at most one batch sent twice per sender, nobody lost.
- The broker's connections closed twice mid-campaign: every request FCM accepted is recorded sent,
  and the api's fleet gauges are fresh again within 30 s.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald.settings import Settings
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

BATCH_SIZE = Settings.model_fields["sender_batch_size"].default
SENDERS = 2
POPULATION = 10_000
SLOW_FCM_MS = 40


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def stopped(stack: Stack) -> Iterator[Callable[[str], None]]:
    """``stop(name)`` SIGSTOPs a process; whatever the test does, it runs again at the end."""
    stopped_now: list[str] = []

    def stop(name: str) -> None:
        stack.processes[name].process.send_signal(signal.SIGSTOP)
        stopped_now.append(name)

    yield stop
    for name in stopped_now:
        stack.processes[name].process.send_signal(signal.SIGCONT)


def under_way(fleet: Fleet, api: Api, emulator: EmulatorClient, sent: int = 2_000,
              population: int = POPULATION) -> tuple[str, set[str]]:
    devices, audience = fleet.import_own(api, reachable_devices(population))
    emulator.configure(latency_ms=SLOW_FCM_MS)
    campaign_id = api.create_campaign(audience=audience)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= sent, 60, "sending")
    return campaign_id, {device["token"] for device in devices}


def received_by(emulator: EmulatorClient, tokens: set[str]) -> list[Received]:
    return [row for row in emulator.received() if row.token in tokens and row.reached_fcm]


def epoch_s(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


MARKER = "marker-of-the-test"


def mark(stack: Stack) -> None:
    """A request of the test's own, sent the moment it saw what it waits for. The emulator
    stamps requests as its loop reaches them (late, when it is busy): one stamped after the
    marker reached it after the marker, so it was sent after the test saw what it waited for."""
    httpx.post(f"{stack.config.fcm_url}/v1/projects/herald-local/messages:send",
               json={"message": {"token": MARKER, "notification": {"title": "m"}}},
               headers=stack.config.fcm_headers(), timeout=10).raise_for_status()


def after_the_marker(emulator: EmulatorClient, tokens: set[str]) -> list[Received]:
    rows = emulator.received()
    marker = next(row for row in rows if row.token == MARKER)
    return [row for row in rows if row.token in tokens and row.received_at > marker.received_at]


CAUGHT_IN_THE_WRITE_S = 0.5
"""How soon after the wake a request caught by the stop between its last check and its write
reaches the emulator (stamped as the emulator's loop gets to it)."""


def caught_in_the_write(late: list[Received], woken: float) -> bool:
    """Whether ``late`` (requests after the marker) is at most the one request the stop may
    catch between its last check (``LastCheckedBody``: fence and cancel) and the write into its
    socket, microseconds later in the same step of the loop: it leaves at the wake. The loop
    runs one step at a time, so no second request can be caught there; any request decided after
    the wake would need the fence, which holds no more."""
    return len(late) <= 1 and all(row.received_at - woken <= CAUGHT_IN_THE_WRITE_S
                                  for row in late)


def assert_the_account_is_exact(api: Api, emulator: EmulatorClient, campaign_id: str,
                                tokens: set[str]) -> dict[str, object]:
    """Final counts = the audit = what FCM accepted, token for token."""
    campaign = api.campaign(campaign_id)
    accepted = {row.token for row in received_by(emulator, tokens) if row.accepted}
    sent = set(api.audit_tokens(campaign_id, "sent"))
    unsent = set(api.audit_tokens(campaign_id, "unsent"))
    failed = set(api.audit_tokens(campaign_id, "failed"))
    counts = campaign["counts"]
    assert sent == accepted, (f"{len(accepted - sent)} accepted by FCM and not in the sent "
                              f"audit; {len(sent - accepted)} in it and not accepted")
    assert (counts["sent"], counts["failed"], counts["unsent"]) == (
        len(sent), len(failed), len(unsent)), counts
    assert not (sent & unsent) and sent | unsent | failed == tokens
    return campaign


# --- a sender stopped by the kernel ----------------------------------------------------------------
def test_a_sender_stopped_while_its_campaign_is_cancelled_sends_nothing_after_the_cancel(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient,
        stopped: Callable[[str], None]) -> None:
    campaign_id, tokens = under_way(fleet, api, emulator)
    stopped("sender-1")
    assert api.http.post(f"/v1/campaigns/{campaign_id}/cancel").status_code == 202
    cancelled = api.wait_until(campaign_id, {"cancelled"}, timeout_s=30)
    mark(stack)
    time.sleep(2)  # stopped long after the confirmation
    woken = time.time()
    stack.processes["sender-1"].process.send_signal(signal.SIGCONT)
    wait_for(lambda: settled(api, campaign_id, cancelled), 30,
             "the woken sender to record what it had on the wire")

    late = after_the_marker(emulator, tokens)
    marker = next(row for row in emulator.received() if row.token == MARKER)
    assert caught_in_the_write(late, woken), (
        f"{len(late)} requests started after the cancel was confirmed: marker "
        f"{marker.received_at:.3f}, woken {woken:.3f}, late from "
        f"{min(r.received_at for r in late):.3f} to {max(r.received_at for r in late):.3f}")
    assert_the_account_is_exact(api, emulator, campaign_id, tokens)


def settled(api: Api, campaign_id: str, confirmed: dict[str, object]) -> bool:
    """The woken sender recorded its answers (the final counts may have been recounted)."""
    time.sleep(1)
    before = api.campaign(campaign_id)["counts"]
    time.sleep(1)
    return bool(api.campaign(campaign_id)["counts"] == before)


def test_a_stopped_sender_is_taken_over_by_heartbeat_and_sends_nothing_when_it_wakes(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient,
        stopped: Callable[[str], None]) -> None:
    campaign_id, tokens = under_way(fleet, api, emulator, sent=1_000, population=6_000)
    stopped("sender-1")
    frozen_at = time.time()
    campaign = api.wait_finished(campaign_id, timeout_s=60)
    taken_over_s = epoch_s(str(campaign["finished_at"])) - frozen_at
    mark(stack)
    woken = time.time()
    stack.processes["sender-1"].process.send_signal(signal.SIGCONT)
    time.sleep(3)

    assert campaign["status"] == "completed", campaign
    assert taken_over_s < 45, f"finished {taken_over_s:.0f} s after the sender stopped"
    rows = received_by(emulator, tokens)
    late = after_the_marker(emulator, tokens)
    assert caught_in_the_write(late, woken), f"sent after completion: {late}"
    per_token = Counter(row.token for row in rows if row.accepted)
    assert set(per_token) == tokens, "a device got nothing"
    assert sum(per_token.values()) - len(tokens) <= BATCH_SIZE  # its unrecorded window at most
    assert_the_account_is_exact(api, emulator, campaign_id, tokens)


# --- the database and the broker lost --------------------------------------------------------------
def test_the_database_killed_and_restarted_mid_campaign(
        fleet: Fleet, api: Api, emulator: EmulatorClient,
        mongodb_killer: Callable[[Callable[[], object]], None]) -> None:
    campaign_id, tokens = under_way(fleet, api, emulator)
    answers: list[httpx.Response] = []

    def while_down() -> None:
        time.sleep(1)
        answers.append(api.http.get(f"/v1/campaigns/{campaign_id}"))
        time.sleep(4)

    mongodb_killer(while_down)
    back_at = time.time()
    [meanwhile] = answers
    assert meanwhile.status_code == 503 and "Retry-After" in meanwhile.headers
    campaign = api.wait_finished(campaign_id, timeout_s=90)

    assert campaign["status"] == "completed", campaign
    assert epoch_s(str(campaign["finished_at"])) - back_at < 30
    per_token = Counter(row.token for row in received_by(emulator, tokens) if row.accepted)
    assert set(per_token) == tokens, "a device got nothing"
    assert sum(per_token.values()) - len(tokens) <= SENDERS * BATCH_SIZE
    assert_the_account_is_exact(api, emulator, campaign_id, tokens)


def test_broker_connections_closed_twice_lose_no_answer_and_the_gauges_recover(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    campaign_id, tokens = under_way(fleet, api, emulator)
    vhost = stack.config.rabbitmq_url.rsplit("/", 1)[1]
    for _ in range(2):
        subprocess.run(["rabbitmqctl", "-q", "close_all_connections", "-p", vhost,
                        "test: connections closed"], check=True, capture_output=True, timeout=60)
        time.sleep(1)
    closed_at = time.time()
    campaign = api.wait_finished(campaign_id, timeout_s=120)
    assert campaign["status"] == "completed", campaign
    assert_the_account_is_exact(api, emulator, campaign_id, tokens)
    wait_for(lambda: gauges_refreshed_after(stack, closed_at), 30, "the fleet gauges to refresh")


def gauges_refreshed_after(stack: Stack, moment: float) -> bool:
    text = httpx.get(f"{stack.config.api_url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "herald_fleet_gauges_refreshed_timestamp_seconds":
                return bool(sample.value > moment)
    return False
