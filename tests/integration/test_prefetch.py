"""Each consumer's prefetch, as RabbitMQ itself reports it (``rabbitmqctl list_consumers``).

Every queue a Herald service consumes is consumed on a channel of its own with the limit its
setting names: a sender holds at most ``HERALD_SENDER_PREFETCH`` chunks, and a broadcast cancel
never waits behind a window of work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest

from devstack.isolation import broker_report
from fcm_emulator.client import EmulatorClient
from herald import names
from herald.adapters import rabbit
from herald.runtime.worker import Compose, PodParts, running_pod
from herald.settings import Settings
from services.dispatcher.main import compose as compose_dispatcher
from services.scheduler.main import compose as compose_scheduler
from services.sender.main import compose as compose_sender
from tests.factories import publish_chunks, sending_campaign
from tests.support import wait_for

SENDER_PREFETCH = 3
SENDER_PACED_PREFETCH = 7
DISPATCHER_PREFETCH = 7


@pytest.fixture
async def pods(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[dict[str, PodParts]]:
    """One pod of each worker service and an api pod, consuming, their loops running."""
    settings = broker_settings.model_copy(update={
        "sender_prefetch": SENDER_PREFETCH, "dispatcher_prefetch": DISPATCHER_PREFETCH,
        "sender_paced_prefetch": SENDER_PACED_PREFETCH})
    composers: dict[str, Compose | None] = {
        "api": None, "dispatcher": compose_dispatcher, "sender": compose_sender,
        "scheduler": compose_scheduler}
    async with contextlib.AsyncExitStack() as stack:
        started = {}
        for service, compose in composers.items():
            parts, _ = await stack.enter_async_context(running_pod(
                service, settings, acknowledges_cancels=service != "api", compose=compose))
            started[service] = parts
        yield started


def vhost_name(settings: Settings) -> str:
    return settings.rabbitmq_url.rsplit("/", 1)[1]


async def test_every_consumer_has_the_prefetch_its_setting_names_on_a_channel_of_its_own(
        pods: dict[str, PodParts], broker_settings: Settings) -> None:
    consumers = broker_report(vhost_name(broker_settings), "list_consumers",
                              "queue_name", "channel_pid", "prefetch_count")
    prefetch = {row["queue_name"]: int(row["prefetch_count"]) for row in consumers}
    expected = {names.CHUNKS_QUEUE: SENDER_PREFETCH, names.URGENT_CHUNKS_QUEUE: SENDER_PREFETCH,
                names.BULK_CHUNKS_QUEUE: SENDER_PREFETCH,
                names.PACED_CHUNKS_QUEUE: SENDER_PACED_PREFETCH,
                names.DEAD_CHUNKS_QUEUE: rabbit.DEAD_LETTER_PREFETCH,
                names.DISPATCH_QUEUE: DISPATCHER_PREFETCH}
    expected.update({names.pod_cancel_queue(pod.identity.id): rabbit.CANCEL_PREFETCH
                     for pod in pods.values()})
    assert prefetch == expected
    channels = [row["channel_pid"] for row in consumers]
    assert len(set(channels)) == len(channels), "two consumers share a channel"


async def test_a_sender_holds_no_more_chunks_than_its_prefetch_and_the_rest_stays_ready(
        pods: dict[str, PodParts], broker_settings: Settings, emulator: EmulatorClient) -> None:
    """Every FCM request takes a second, so each chunk stays in the sender's hands: RabbitMQ
    must show exactly the prefetch unacknowledged on its channel and the rest ready."""
    emulator.configure(latency_ms=1000)
    chunks = [[f"token-{seq}"] for seq in range(40)]
    document = await sending_campaign(pods["sender"].resources.stores, chunks)
    await publish_chunks(pods["sender"].resources.bus, document, chunks)
    vhost = vhost_name(broker_settings)

    def sender_channel() -> dict[str, str] | None:
        rows = broker_report(vhost, "list_channels", "prefetch_count", "messages_unacknowledged")
        held = [row for row in rows if int(row["prefetch_count"]) == SENDER_PREFETCH
                and int(row["messages_unacknowledged"]) > 0]
        return held[0] if held else None

    channel = await asyncio.to_thread(wait_for, sender_channel, 10, "the sender to hold chunks")
    assert int(channel["messages_unacknowledged"]) == SENDER_PREFETCH
    assert await messages_ready(broker_settings.rabbitmq_url, names.CHUNKS_QUEUE) >= (
        len(chunks) - 2 * SENDER_PREFETCH)


async def messages_ready(url: str, queue: str) -> int:
    """Ready messages as RabbitMQ counts them now (a passive declare; ``rabbitmqctl
    list_queues`` reports quorum queues' counts only every few seconds)."""
    async with await aio_pika.connect(url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)
