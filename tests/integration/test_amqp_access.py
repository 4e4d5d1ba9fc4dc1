"""Who may do what on the broker (issue 10): the services' user and the ``herald-cancel`` user have
the permissions ``devstack.broker_users`` gives them (the same ones Docker Compose loads), and
RabbitMQ itself refuses everything else. A cancel's actor is its AMQP ``user_id``, which RabbitMQ
checks against the connection's user; without one, what the message declares, unverified.

Every refusal asserted here is the broker's own AMQP error, on a real RabbitMQ.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aio_pika
import aiormq
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from devstack.broker_users import BrokerUsers
from herald import names
from herald.domain.access import Actor, ActorKind, LogEntry
from herald.domain.documents import Campaign
from herald.domain.status import Status
from herald.runtime.worker import PodParts, running_pod
from herald.settings import Settings
from tests.factories import campaign
from tests.integration.helpers import vhost_name
from tests.support import eventually

ChannelAction = Callable[[AbstractChannel], Awaitable[Any]]


@pytest.fixture
async def pod(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[PodParts]:
    """A pod connected as the service user: it declares Herald's whole topology on start."""
    async with running_pod("api", broker_settings, acknowledges_cancels=False) as (parts, _):
        yield parts


@pytest.fixture
def cancel_url(broker_users: BrokerUsers, broker_settings: Settings) -> str:
    return broker_users.cancel.url(vhost_name(broker_settings.rabbitmq_url))


@pytest.fixture
async def as_cancel_user(cancel_url: str) -> AsyncIterator[AbstractRobustConnection]:
    async with await aio_pika.connect(cancel_url) as connection:
        yield connection


@pytest.fixture
async def as_service_user(broker_settings: Settings) -> AsyncIterator[AbstractRobustConnection]:
    async with await aio_pika.connect(broker_settings.rabbitmq_url) as connection:
        yield connection


async def settle(message: AbstractIncomingMessage) -> None:
    await message.ack()


async def refused(connection: AbstractRobustConnection, action: ChannelAction,
                  error: type[aiormq.exceptions.AMQPError]) -> str:
    """Run ``action`` on a fresh channel (publishes wait for the broker's confirm) and return
    the broker's reply text; fails unless the broker closed the channel with ``error``."""
    channel = await connection.channel(publisher_confirms=True)
    with pytest.raises(error) as caught:
        await action(channel)
    return str(caught.value)


def publish(exchange: str, routing_key: str = "", body: bytes = b"{}",
            user_id: str | None = None) -> ChannelAction:
    async def run(channel: AbstractChannel) -> None:
        target = await channel.get_exchange(exchange, ensure=False) if exchange \
            else channel.default_exchange
        await target.publish(aio_pika.Message(body, user_id=user_id), routing_key=routing_key)
    return run


def cancel_body(campaign_id: str, requested_by: str | None = None) -> bytes:
    message = {"campaign_id": campaign_id, "reason": "broken link"}
    if requested_by is not None:
        message["requested_by"] = requested_by
    return orjson.dumps(message)


async def in_progress_campaign(pod: PodParts) -> Campaign:
    document = campaign(status=Status.IN_PROGRESS)
    await pod.resources.stores.campaigns.insert(document)
    return document


async def cancelled(pod: PodParts, campaign_id: str) -> Campaign:
    """The campaign once cancelled (waits for the pod to apply the message)."""
    async def done() -> Campaign | None:
        stored = await pod.resources.stores.campaigns.get(campaign_id)
        return stored if stored is not None and stored.status is Status.CANCELLED else None
    return await eventually(done, what=f"campaign {campaign_id} cancelled")


async def log_of(pod: PodParts, campaign_id: str) -> list[LogEntry]:
    return await pod.resources.stores.operator_log.page(
        campaign_id=campaign_id, actor_id=None, before=None, limit=10)


# --- the herald-cancel user: write to herald.cancel, nothing else ---------------------------------

@pytest.mark.parametrize(("exchange", "routing_key"), [
    (names.DEAD_LETTER_EXCHANGE, names.DEAD_CHUNKS_ROUTING_KEY),
    ("", names.CHUNKS_QUEUE),  # the default exchange, straight into the senders' work queue
    ("amq.fanout", ""),
    ("amq.topic", "anything"),
])
async def test_the_cancel_user_cannot_publish_to_any_other_exchange(
        pod: PodParts, as_cancel_user: AbstractRobustConnection, broker_users: BrokerUsers,
        exchange: str, routing_key: str) -> None:
    reply = await refused(as_cancel_user, publish(exchange, routing_key),
                          aiormq.exceptions.ChannelAccessRefused)
    resource = exchange or "amq.default"
    assert f"ACCESS_REFUSED - access to exchange '{resource}'" in reply
    assert broker_users.cancel.name in reply


@pytest.mark.parametrize("queue", [names.CHUNKS_QUEUE, names.DISPATCH_QUEUE,
                                   names.DEAD_MESSAGES_QUEUE, "pod"])
async def test_the_cancel_user_cannot_consume_nor_get(
        pod: PodParts, as_cancel_user: AbstractRobustConnection, queue: str) -> None:
    name = names.pod_cancel_queue(pod.identity.id) if queue == "pod" else queue

    async def consume(channel: AbstractChannel) -> None:
        declared = await channel.get_queue(name, ensure=False)
        await declared.consume(settle)

    async def get(channel: AbstractChannel) -> None:
        declared = await channel.get_queue(name, ensure=False)
        await declared.get(fail=False)

    for action in (consume, get):
        reply = await refused(as_cancel_user, action, aiormq.exceptions.ChannelAccessRefused)
        assert f"ACCESS_REFUSED - access to queue '{name}'" in reply


async def test_the_cancel_user_cannot_declare_bind_or_delete_anything(
        pod: PodParts, as_cancel_user: AbstractRobustConnection) -> None:
    async def own_queue(channel: AbstractChannel) -> None:
        await channel.declare_queue(exclusive=True)  # even a server-named, private one

    async def redeclare_cancel_exchange(channel: AbstractChannel) -> None:
        await channel.declare_exchange(names.CANCEL_EXCHANGE, aio_pika.ExchangeType.FANOUT,
                                       durable=True)

    async def new_exchange(channel: AbstractChannel) -> None:
        await channel.declare_exchange("herald.cancel-tap", aio_pika.ExchangeType.FANOUT)

    async def delete_cancel_exchange(channel: AbstractChannel) -> None:
        await channel.exchange_delete(names.CANCEL_EXCHANGE)

    for action, resource in ((own_queue, "queue 'amq.gen-"),
                             (redeclare_cancel_exchange, f"exchange '{names.CANCEL_EXCHANGE}'"),
                             (new_exchange, "exchange 'herald.cancel-tap'"),
                             (delete_cancel_exchange, f"exchange '{names.CANCEL_EXCHANGE}'")):
        reply = await refused(as_cancel_user, action, aiormq.exceptions.ChannelAccessRefused)
        assert f"ACCESS_REFUSED - access to {resource}" in reply, action.__name__


async def test_a_cancel_from_the_cancel_user_with_its_user_id_is_applied_with_a_verified_actor(
        pod: PodParts, as_cancel_user: AbstractRobustConnection,
        broker_users: BrokerUsers) -> None:
    user = broker_users.cancel.name
    document = await in_progress_campaign(pod)
    channel = await as_cancel_user.channel(publisher_confirms=True)
    await publish(names.CANCEL_EXCHANGE, body=cancel_body(document.id, "ops-script"),
                  user_id=user)(channel)

    stored = await cancelled(pod, document.id)
    expected = Actor(id=f"amqp:{user}", name=f"amqp:{user}", kind=ActorKind.AMQP, verified=True)
    assert stored.cancel is not None
    assert stored.cancel.requested_by == expected  # the user_id wins over what the body says
    assert stored.cancel.reason == "broken link"
    (entry,) = await eventually(lambda: log_of(pod, document.id), what="the operator log entry")
    assert (entry.actor, entry.action, entry.target_id) == (expected, "campaign.cancel",
                                                            document.id)
    assert entry.status_code == 202  # in progress: cancelling first, as the API answers
    assert entry.detail is not None and names.CANCEL_EXCHANGE in entry.detail


async def test_a_cancel_whose_user_id_is_not_the_connections_user_is_refused_by_rabbitmq(
        pod: PodParts, as_cancel_user: AbstractRobustConnection,
        broker_users: BrokerUsers) -> None:
    impersonated = await in_progress_campaign(pod)
    for claimed in ("herald-cancel", broker_users.service.name, "lead@example.com"):
        reply = await refused(
            as_cancel_user, publish(names.CANCEL_EXCHANGE, body=cancel_body(impersonated.id),
                                    user_id=claimed),
            aiormq.exceptions.ChannelPreconditionFailed)
        assert (f"user_id property set to '{claimed}' but authenticated user was "
                f"'{broker_users.cancel.name}'") in reply

    # The pod handles its queue in order: once a later, honest cancel is applied, the refused
    # ones would have been too, had they reached the exchange.
    honest = await in_progress_campaign(pod)
    channel = await as_cancel_user.channel(publisher_confirms=True)
    await publish(names.CANCEL_EXCHANGE, body=cancel_body(honest.id),
                  user_id=broker_users.cancel.name)(channel)
    await cancelled(pod, honest.id)
    still = await pod.resources.stores.campaigns.get(impersonated.id)
    assert still is not None and still.status is Status.IN_PROGRESS
    assert await log_of(pod, impersonated.id) == []


async def test_a_cancel_without_user_id_is_recorded_unverified_with_its_declared_sender(
        pod: PodParts, as_cancel_user: AbstractRobustConnection) -> None:
    document = campaign()  # pending: cancelled at once
    await pod.resources.stores.campaigns.insert(document)
    channel = await as_cancel_user.channel(publisher_confirms=True)
    await publish(names.CANCEL_EXCHANGE, body=cancel_body(document.id, "ops-script"))(channel)

    stored = await cancelled(pod, document.id)
    declared = Actor(id="amqp", name="amqp:ops-script", kind=ActorKind.AMQP, verified=False)
    assert stored.cancel is not None and stored.cancel.requested_by == declared
    (entry,) = await eventually(lambda: log_of(pod, document.id), what="the operator log entry")
    assert entry.actor == declared
    assert entry.actor.label == "amqp:ops-script (unverified)"
    assert entry.status_code == 200  # as the API answers a cancel that took effect at once


# --- the service user: Herald's names only ----------------------------------------------------------

async def test_the_service_user_may_not_touch_what_is_not_heralds(
        pod: PodParts, as_service_user: AbstractRobustConnection, vhost: str) -> None:
    async with await aio_pika.connect(vhost) as admin:  # guest: another application's queue
        other = await (await admin.channel()).declare_queue("billing.invoices", durable=False,
                                                            auto_delete=True)

        async def declare_foreign_queue(channel: AbstractChannel) -> None:
            await channel.declare_queue("billing.jobs")

        async def declare_foreign_exchange(channel: AbstractChannel) -> None:
            await channel.declare_exchange("heraldic", aio_pika.ExchangeType.FANOUT)

        async def consume_foreign_queue(channel: AbstractChannel) -> None:
            queue = await channel.get_queue(other.name, ensure=False)
            await queue.consume(settle)

        for action, resource in (
                (declare_foreign_queue, "queue 'billing.jobs'"),
                (declare_foreign_exchange, "exchange 'heraldic'"),
                (consume_foreign_queue, "queue 'billing.invoices'"),
                (publish("amq.topic", "billing"), "exchange 'amq.topic'"),
                (publish("amq.direct", "x"),
                 "exchange 'amq.direct'")):
            reply = await refused(as_service_user, action, aiormq.exceptions.ChannelAccessRefused)
            assert f"ACCESS_REFUSED - access to {resource}" in reply, action
