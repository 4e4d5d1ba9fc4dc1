"""Issue 21, finding 3: malformed cancel messages from any AMQP publisher. Every pod's own queue
receives each broadcast, yet one copy is dead-lettered and one line logged, not one per pod;
``herald.dead`` is bounded by a policy the broker itself reports; no log line carries the body."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest

from devstack.broker_users import rabbitmqctl
from devstack.isolation import broker_report
from herald import names
from herald.domain.status import Status, Verdict
from herald.runtime.worker import PodParts, running_pod
from herald.settings import Settings
from tests.factories import campaign
from tests.integration.helpers import vhost_name
from tests.support import eventually

PODS = 3
MALFORMED = [b'{"campaign_id": "%d", "padding": "%s"}' % (i, b"x" * 100_000) for i in range(4)]


@pytest.fixture
async def pods(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[list[PodParts]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [(await stack.enter_async_context(running_pod(
            "api", broker_settings, acknowledges_cancels=False)))[0] for _ in range(PODS)]


async def publish(url: str, bodies: list[bytes]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(names.CANCEL_EXCHANGE, ensure=False)
        for body in bodies:
            await exchange.publish(aio_pika.Message(body), routing_key="")


async def dead_letters(url: str) -> int:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(names.DEAD_MESSAGES_QUEUE, passive=True)
        return int(queue.declaration_result.message_count or 0)


async def test_a_malformed_cancel_is_dead_lettered_and_logged_once_not_once_per_pod(
        pods: list[PodParts], vhost: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    await publish(vhost, MALFORMED)
    # then a good cancel: each pod handles its queue in order, so once every pod has seen this
    # one, every pod has handled the malformed ones before it
    marker = campaign(status=Status.IN_PROGRESS)
    await pods[0].resources.stores.campaigns.insert(marker)
    await publish(vhost, [b'{"campaign_id": "%s"}' % marker.id.encode()])

    async def everyone_saw_the_marker() -> bool:
        return all(pod.view.known(marker.id) is Verdict.STOP for pod in pods)

    await eventually(everyone_saw_the_marker, what="every pod to handle its queue")
    assert await eventually(lambda: _count_is(vhost, len(MALFORMED)), timeout_s=5)
    malformed_lines = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed_lines) == len(MALFORMED)
    assert max(len(r.getMessage()) for r in caplog.records) <= 2000


async def _count_is(url: str, expected: int) -> bool:
    count = await dead_letters(url)
    assert count <= expected, f"{count} dead letters for {expected} malformed messages"
    return count == expected


def test_herald_dead_is_bounded_by_a_policy_the_broker_reports(vhost: str) -> None:
    policies = json.loads(rabbitmqctl("list_policies", "-p", vhost_name(vhost),
                                      "--formatter", "json"))
    bound = next(p for p in policies if p["name"] == names.DEAD_MESSAGES_POLICY)
    assert bound["pattern"] == r"^herald\.dead$" and bound["apply-to"] == "queues"
    definition = bound["definition"]
    definition = json.loads(definition) if isinstance(definition, str) else definition
    assert definition == {"max-length": 10_000, "max-length-bytes": 64 * 1024 * 1024,
                          "overflow": "drop-head"}


async def test_the_policy_applies_to_herald_dead_as_the_services_declare_it(
        pods: list[PodParts], vhost: str) -> None:
    queues = broker_report(vhost_name(vhost), "list_queues", "name", "policy")
    assert {"name": names.DEAD_MESSAGES_QUEUE, "policy": names.DEAD_MESSAGES_POLICY} in queues
