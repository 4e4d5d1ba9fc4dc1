"""Senders take only their prefetch from ``herald.chunks`` (issue 15), as RabbitMQ reports it:
a sender started mid-campaign gets work at once and a fair share of it, and a sender killed
with ``kill -9`` hands back no more than it held, all of which is redelivered."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from pymongo import MongoClient

from devstack.isolation import broker_report
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald import names
from tests.e2e.harness import Api, accepted, reachable_devices
from tests.support import wait_for

PREFETCH = 4
CONCURRENCY = 50  # requests in flight per sender: 1,000 recipients/s each at 50 ms
FCM_LATENCY_MS = 50
CHUNK_SIZE = 100
POPULATION = 12_000


@pytest.fixture
def scale_out_stack(stack: Stack) -> Stack:
    stack.config.extra_env.update({"HERALD_SENDER_PREFETCH": str(PREFETCH),
                                   "HERALD_SENDER_CONCURRENCY": str(CONCURRENCY)})
    return stack


class UnackedWatch:
    """Samples, from RabbitMQ, the unacknowledged chunks of every ``herald.chunks`` consumer's
    channel, in a background thread, until stopped; the largest count seen per channel."""

    def __init__(self, vhost: str) -> None:
        self._vhost = vhost
        self.most: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UnackedWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            consumers = broker_report(self._vhost, "list_consumers", "queue_name", "channel_pid")
            chunk_channels = {row["channel_pid"] for row in consumers
                              if row["queue_name"] == names.CHUNKS_QUEUE}
            for row in broker_report(self._vhost, "list_channels", "pid",
                                     "messages_unacknowledged"):
                if row["pid"] in chunk_channels:
                    held = int(row["messages_unacknowledged"])
                    self.most[row["pid"]] = max(self.most[row["pid"]], held)
            self.samples += 1
            self._stop.wait(0.5)


def sent_per_pod(stack: Stack, campaign_id: str, since: float) -> Counter[str]:
    """Recipients each sender recorded as sent from ``since`` (epoch seconds) on, from MongoDB."""
    shares: Counter[str] = Counter()
    with MongoClient(stack.config.mongodb_url, tz_aware=True) as client:
        for delivery in client[stack.config.database][names.DELIVERIES].find(
                {"campaign_id": campaign_id}, {"pod": 1, "at": 1, "sent": 1}):
            if delivery["at"].timestamp() >= since:
                shares[delivery["pod"]] += len(delivery["sent"])
    return shares


def first_delivery_of(stack: Stack, campaign_id: str, pod_id: str) -> float | None:
    with MongoClient(stack.config.mongodb_url, tz_aware=True) as client:
        first = client[stack.config.database][names.DELIVERIES].find_one(
            {"campaign_id": campaign_id, "pod": pod_id}, sort=[("at", 1)])
    return None if first is None else float(first["at"].timestamp())


def sender_ids(api: Api) -> set[str]:
    return {pod["id"] for pod in api.http.get("/v1/pods").json()["pods"]
            if pod["service"] == "sender"}


@pytest.fixture
def unacked(scale_out_stack: Stack) -> Iterator[UnackedWatch]:
    with UnackedWatch(scale_out_stack.config.rabbitmq_url.rsplit("/", 1)[1]) as watch:
        yield watch


def test_a_sender_started_mid_campaign_gets_work_at_once_and_a_fair_share(
        scale_out_stack: Stack, api: Api, emulator: EmulatorClient, unacked: UnackedWatch) -> None:
    stack = scale_out_stack
    stack.start(senders=1, schedulers=0)
    first = sender_ids(api)
    population = reachable_devices(POPULATION)
    api.import_devices(population)
    emulator.configure(latency_ms=FCM_LATENCY_MS)
    campaign_id = api.create_campaign(chunk_size=CHUNK_SIZE)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 1_000, 60, "sending")

    stack.start_service("sender", "sender-2")
    second = wait_for(lambda: sender_ids(api) - first, 30, "the second sender's heartbeat")
    joined = time.time()
    (newcomer,) = second
    got_work = wait_for(lambda: first_delivery_of(stack, campaign_id, newcomer), 10,
                        "the second sender to record a batch")
    assert got_work - joined <= 2.0, f"the second sender waited {got_work - joined:.1f} s"

    campaign = api.wait_finished(campaign_id, timeout_s=120)
    assert campaign["status"] == "completed"
    assert set(accepted(emulator.received())) == {d["token"] for d in population}
    shares = sent_per_pod(stack, campaign_id, since=got_work)
    (old,) = first
    assert shares[newcomer] > 0 and shares[old] > 0
    assert abs(shares[newcomer] - shares[old]) <= 0.25 * max(shares.values()), shares
    assert unacked.samples >= 3
    assert unacked.most and max(unacked.most.values()) <= PREFETCH, unacked.most


def test_kill_9_of_a_sender_hands_back_only_what_it_held_and_loses_nothing(
        scale_out_stack: Stack, api: Api, emulator: EmulatorClient, unacked: UnackedWatch) -> None:
    stack = scale_out_stack
    stack.start(senders=2, schedulers=0)
    population = reachable_devices(POPULATION // 2)
    api.import_devices(population)
    emulator.configure(latency_ms=FCM_LATENCY_MS)
    campaign_id = api.create_campaign(chunk_size=CHUNK_SIZE)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 1_500, 60, "sending")
    stack.processes["sender-1"].kill()

    campaign = api.wait_finished(campaign_id, timeout_s=120)
    delivered = accepted(emulator.received())
    assert campaign["status"] == "completed", campaign
    assert set(delivered) == {d["token"] for d in population}
    assert sum(delivered.values()) - len(population) <= CHUNK_SIZE  # its one batch on the wire
    assert campaign["counts"]["sent"] == len(population)
    assert unacked.samples >= 3
    assert unacked.most and max(unacked.most.values()) <= PREFETCH, unacked.most
