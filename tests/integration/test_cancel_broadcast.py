"""The ``herald.cancel`` fanout as other teams use it: any AMQP client, any payload."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest

from herald import names
from herald.domain.access import Actor, ActorKind
from herald.domain.status import Status
from herald.observability import CANCEL_UNMATCHED
from herald.runtime.worker import PodParts, running_pod
from herald.settings import Settings
from tests.factories import campaign
from tests.support import eventually


@pytest.fixture
async def pod(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[PodParts]:
    async with running_pod("api", broker_settings, acknowledges_cancels=False) as (parts, _):
        yield parts


async def publish_cancel(vhost: str, body: bytes) -> None:
    connection = await aio_pika.connect(vhost)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(names.CANCEL_EXCHANGE, ensure=False)
        await exchange.publish(aio_pika.Message(body, content_type="application/json"),
                               routing_key="")


async def status_of(pod: PodParts, campaign_id: str) -> Status:
    stored = await pod.resources.stores.campaigns.get(campaign_id)
    assert stored is not None
    return stored.status


async def test_a_cancel_published_by_a_plain_amqp_client_cancels_the_campaign(
        pod: PodParts, vhost: str) -> None:
    document = campaign(status=Status.IN_PROGRESS)
    await pod.resources.stores.campaigns.insert(document)
    campaign_id = document.id
    body = b'{"campaign_id": "%s", "reason": "broken link", "requested_by": "ops-script"}' % (
        campaign_id.encode())
    await publish_cancel(vhost, body)

    async def cancelled() -> bool:
        return await status_of(pod, campaign_id) is Status.CANCELLED

    await eventually(cancelled)
    stored = await pod.resources.stores.campaigns.get(campaign_id)
    assert stored is not None and stored.cancel is not None
    assert stored.cancel.reason == "broken link"
    # no AMQP user_id on this message: its self-declared sender, marked unverified (issue 10)
    assert stored.cancel.requested_by == Actor(id="amqp", name="amqp:ops-script",
                                               kind=ActorKind.AMQP, verified=False)
    assert await pod.resources.flags.is_raised(campaign_id)


async def test_a_pending_campaign_cancelled_over_amqp_is_cancelled_at_once(
        pod: PodParts, vhost: str) -> None:
    document = campaign()
    await pod.resources.stores.campaigns.insert(document)
    campaign_id = document.id
    await publish_cancel(vhost, b'{"campaign_id": "%s"}' % campaign_id.encode())

    async def cancelled() -> bool:
        return await status_of(pod, campaign_id) is Status.CANCELLED

    await eventually(cancelled)


@pytest.mark.parametrize("body", [b"not json", b'{"reason": "no id"}',
                                  b'{"campaign_id": "zzz"}', b'{"campaign_id": "%s", "version": 9}'
                                  % (b"a" * 24)])
async def test_a_malformed_cancel_message_is_dead_lettered_and_the_pod_lives_on(
        pod: PodParts, vhost: str, body: bytes) -> None:
    await publish_cancel(vhost, body)
    connection = await aio_pika.connect(vhost)
    async with connection:
        channel = await connection.channel()
        dead = await channel.get_queue(names.DEAD_CANCELS_QUEUE, ensure=False)

        async def arrived() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await dead.get(fail=False, no_ack=True)

        message = await eventually(arrived)
    assert message.body == body
    document = campaign()
    await pod.resources.stores.campaigns.insert(document)
    await publish_cancel(vhost, b'{"campaign_id": "%s"}' % document.id.encode())

    async def still_listening() -> bool:
        return await status_of(pod, document.id) is Status.CANCELLED

    await eventually(still_listening)


async def test_a_cancel_for_an_unknown_campaign_is_counted_as_unmatched(
        pod: PodParts, vhost: str) -> None:
    before = CANCEL_UNMATCHED._value.get()
    await publish_cancel(vhost, b'{"campaign_id": "%s"}' % (b"0" * 24))

    async def counted() -> bool:
        return bool(CANCEL_UNMATCHED._value.get() == before + 1)

    await eventually(counted)
