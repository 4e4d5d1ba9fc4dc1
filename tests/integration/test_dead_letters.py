"""Issue 21, finding 3, and issue 31 point 5: malformed cancel messages from any AMQP publisher.
Every pod's own queue receives each broadcast, yet one copy is dead-lettered and one line logged,
not one per pod; they go to ``herald.dead.cancel``, bounded by a policy the broker reports, and
never into ``herald.dead`` (what operators keep there cannot be pushed out by the cancel user); a
message over 64 KiB is dropped with one short line; no log line carries the body."""

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
MALFORMED = [b'{"campaign_id": "%d", "padding": "%s"}' % (i, b"x" * 30_000) for i in range(4)]
HUGE = b'{"campaign_id": "6b0137d0eaff6ead39685496", "reason": "%s"}' % (b"x" * (1 << 20))


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


async def dead_letters(url: str, queue_name: str = names.DEAD_CANCELS_QUEUE) -> int:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        return int(queue.declaration_result.message_count or 0)


async def everyone_heard_a_marker(pods: list[PodParts], vhost: str) -> None:
    """A good cancel after what a test published: each pod handles its queue in order, so once
    every pod has seen this one, every pod has handled what came before it."""
    marker = campaign(status=Status.IN_PROGRESS)
    await pods[0].resources.stores.campaigns.insert(marker)
    await publish(vhost, [b'{"campaign_id": "%s"}' % marker.id.encode()])

    async def everyone_saw_the_marker() -> bool:
        return all(pod.view.known(marker.id) is Verdict.STOP for pod in pods)

    await eventually(everyone_saw_the_marker, what="every pod to handle its queue")


async def test_a_malformed_cancel_is_dead_lettered_and_logged_once_not_once_per_pod(
        pods: list[PodParts], vhost: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    await publish(vhost, MALFORMED)
    await everyone_heard_a_marker(pods, vhost)
    assert await eventually(lambda: _count_is(vhost, len(MALFORMED)), timeout_s=5)
    assert await dead_letters(vhost, names.DEAD_MESSAGES_QUEUE) == 0, "herald.dead untouched"
    malformed_lines = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed_lines) == len(MALFORMED)
    assert max(len(r.getMessage()) for r in caplog.records) <= 2000


async def test_a_cancel_of_a_mebibyte_is_dropped_with_one_short_line(
        pods: list[PodParts], vhost: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    kept = (await dead_letters(vhost), await dead_letters(vhost, names.DEAD_MESSAGES_QUEUE))
    await publish(vhost, [HUGE])
    await everyone_heard_a_marker(pods, vhost)
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and len(dropped[0]) < 200, dropped
    assert (await dead_letters(vhost), await dead_letters(vhost, names.DEAD_MESSAGES_QUEUE)
            ) == kept, "neither dead-letter queue took it"


async def _count_is(url: str, expected: int) -> bool:
    count = await dead_letters(url)
    assert count <= expected, f"{count} dead letters for {expected} malformed messages"
    return count == expected


@pytest.mark.parametrize(("policy", "pattern", "length", "size"), [
    (names.DEAD_MESSAGES_POLICY, r"^herald\.dead$", 10_000, 64 * 1024 * 1024),
    (names.DEAD_CANCELS_POLICY, r"^herald\.dead\.cancel$", 1_000, 8 * 1024 * 1024)])
def test_the_dead_letter_queues_are_bounded_by_policies_the_broker_reports(
        vhost: str, policy: str, pattern: str, length: int, size: int) -> None:
    policies = json.loads(rabbitmqctl("list_policies", "-p", vhost_name(vhost),
                                      "--formatter", "json"))
    bound = next(p for p in policies if p["name"] == policy)
    assert bound["pattern"] == pattern and bound["apply-to"] == "queues"
    definition = bound["definition"]
    definition = json.loads(definition) if isinstance(definition, str) else definition
    assert definition == {"max-length": length, "max-length-bytes": size,
                          "overflow": "drop-head"}


async def test_the_policy_applies_to_herald_dead_as_the_services_declare_it(
        pods: list[PodParts], vhost: str) -> None:
    queues = broker_report(vhost_name(vhost), "list_queues", "name", "policy")
    assert {"name": names.DEAD_MESSAGES_QUEUE, "policy": names.DEAD_MESSAGES_POLICY} in queues
    assert {"name": names.DEAD_CANCELS_QUEUE, "policy": names.DEAD_CANCELS_POLICY} in queues
