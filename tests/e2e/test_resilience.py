"""Issue 5's proof: crashes, graceful stops, FCM push-back and infrastructure restarts during a
campaign, every service a separate process. "No loss": every targeted device got at least one
message, the campaign completed, and the audit's sent list is exactly what FCM accepted.

The tests share one fleet (api, dispatcher, two senders: ``Fleet`` in conftest.py), put back
whole before each test, and each targets devices of its own."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import httpx
import pytest

from devstack.processes import port_open
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.settings import Settings
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, accepted, pod_metric, reachable_devices, requests_per_token
from tests.support import wait_for

BATCH_SIZE = Settings.model_fields["sender_batch_size"].default
SLOW_FCM_MS = 40
POPULATION = 10_000


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _campaign_under_way(fleet: Fleet, api: Api, emulator: EmulatorClient, *,
                        chunk_size: int = 500) -> tuple[str, set[str]]:
    """A 10,000-device campaign, well under way (2,000 sent, up to 4,000 more in the senders'
    hands, the rest still queued)."""
    population, audience = fleet.import_own(api, reachable_devices(POPULATION))
    emulator.configure(latency_ms=SLOW_FCM_MS)
    campaign_id = api.create_campaign(chunk_size=chunk_size, audience=audience)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 2_000, 60, "sending")
    return campaign_id, {d["token"] for d in population}


def _assert_nothing_lost(api: Api, emulator: EmulatorClient, campaign_id: str,
                         targeted: set[str], extra_allowed: int) -> None:
    campaign = api.wait_finished(campaign_id, timeout_s=120)
    delivered = accepted(emulator.received())  # requests FCM accepted, per token
    assert campaign["status"] == "completed", campaign
    missing = targeted - set(delivered)
    assert not missing, f"{len(missing)} targeted devices received nothing; campaign: {campaign}"
    assert sum(delivered.values()) - len(targeted) <= extra_allowed
    assert campaign["counts"] == {"targeted": len(targeted), "sent": len(targeted), "failed": 0,
                                  "unsent": 0, "maybe_delivered": 0, "suppressed": 0}
    assert sorted(api.audit_tokens(campaign_id, "sent")) == sorted(accepted(emulator.received()))


def test_kill_9_of_a_sender_loses_nothing_and_duplicates_at_most_its_batch(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    stack.processes["sender-1"].kill()
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=BATCH_SIZE)


def test_sigterm_stops_a_sender_gracefully_with_no_loss_and_no_duplicate(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    grace_s = float(stack.config.extra_env["HERALD_GRACE_PERIOD_S"])
    sender = stack.processes["sender-1"]
    earlier = sender.log_path.stat().st_size  # the shared fleet's log holds earlier tests' lines
    started = time.monotonic()
    exit_code = sender.terminate(timeout_s=grace_s + 5)
    assert exit_code == 0
    assert time.monotonic() - started < grace_s
    log = sender.log_path.read_bytes()[earlier:].decode(errors="replace")
    assert "sender stopped" in log and "Traceback" not in log
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=0)


def test_kill_9_of_the_dispatcher_mid_paging_then_a_new_one_finishes_each_device_once(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    population, audience = fleet.import_own(api, reachable_devices(6_000))
    campaign_id = api.create_campaign(chunk_size=10, audience=audience)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["targeted"] >= 500, 60, "paging")
    stack.processes["dispatcher"].kill()
    paged_when_killed = api.campaign(campaign_id)["counts"]["targeted"]
    assert paged_when_killed < 6_000, "the dispatcher finished paging before it was killed"
    stack.start_service("dispatcher", "dispatcher-2")
    campaign = api.wait_finished(campaign_id, timeout_s=120)
    per_token = requests_per_token(emulator)
    assert campaign["status"] == "completed"
    assert set(per_token) == {d["token"] for d in population}
    assert set(per_token.values()) == {1}, "a device got the campaign twice"
    assert campaign["counts"]["targeted"] == 6_000


def test_fcm_push_back_slows_the_fleet_and_loses_nothing(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    emulator.configure(push_back={"error": "QUOTA_EXCEEDED", "for_s": 3, "retry_after_s": 1})
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=0)
    refused = Counter(r.error for r in emulator.received() if r.error)
    assert refused["QUOTA_EXCEEDED"] > 0
    retried = pod_metric(api, "sender", "herald_fcm_retries_total", error="QUOTA_EXCEEDED")
    assert retried >= refused["QUOTA_EXCEEDED"] > 0


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=120)


def _ready(api: Api) -> dict[str, object]:
    return dict(api.http.get("/readyz").json())


def test_rabbitmq_connections_closed_mid_campaign(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    vhost = stack.config.rabbitmq_url.rsplit("/", 1)[1]
    _rabbitmqctl("close_all_connections", "-p", vhost, "test: connections closed")
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=2 * BATCH_SIZE)


def test_rabbitmq_restarted_mid_campaign(fleet: Fleet, stack: Stack, api: Api,
                                         emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    _rabbitmqctl("stop_app")
    try:
        wait_for(lambda: _ready(api)["checks"]["rabbitmq"] != "ok", 20,  # type: ignore[index]
                 "readiness to report RabbitMQ down")
        assert api.http.get("/readyz").status_code == 503
    finally:
        _rabbitmqctl("start_app")
    wait_for(lambda: _ready(api)["status"] == "ready", 60, "readiness after the restart")
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=2 * BATCH_SIZE)


def test_mongodb_restarted_mid_campaign(fleet: Fleet, stack: Stack, api: Api,
                                        emulator: EmulatorClient, mongodb_restarter: object) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    restart = mongodb_restarter  # stops nx-27017, checks readiness, starts it on the same files
    restart(lambda: wait_for(  # type: ignore[operator]
        lambda: _ready(api)["checks"]["mongodb"] != "ok", 20, "readiness to report MongoDB down"))
    wait_for(lambda: _ready(api)["status"] == "ready", 60, "readiness after the restart")
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=2 * BATCH_SIZE)


REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port",
               "6379", "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
               "--logfile", "/var/log/redis/ci.log"]


def test_redis_restarted_mid_campaign(fleet: Fleet, stack: Stack, api: Api,
                                      emulator: EmulatorClient) -> None:
    campaign_id, targeted = _campaign_under_way(fleet, api, emulator)
    subprocess.run(["redis-cli", "shutdown", "nosave"], capture_output=True, timeout=30)
    try:
        wait_for(lambda: not port_open(6379), 10, "Redis to stop")
        wait_for(lambda: _ready(api)["checks"]["redis"] != "ok", 20,  # type: ignore[index]
                 "readiness to report Redis down")
    finally:
        subprocess.run(REDIS_START, check=True, capture_output=True, timeout=30)
    wait_for(lambda: _ready(api)["status"] == "ready", 60, "readiness after the restart")
    _assert_nothing_lost(api, emulator, campaign_id, targeted, extra_allowed=2 * BATCH_SIZE)


def test_signals_reach_every_service_and_each_exits_zero(stack: Stack, api: Api) -> None:
    """The local launcher's processes are Python itself (no shell in between): SIGTERM and
    SIGINT both stop them gracefully, with exit code 0."""
    stack.start_service("scheduler", "scheduler-1")
    stack.wait_for_pods({"scheduler": 1})
    assert httpx.get(f"{stack.config.api_url}/healthz").status_code == 200
    names = ["api", "dispatcher", "sender-1", "scheduler-1"]
    for index, name in enumerate(names):
        process = stack.processes[name]
        process.process.send_signal(signal.SIGINT if index % 2 else signal.SIGTERM)
        assert process.process.wait(timeout=15) == 0, process.log_tail()
