"""Issue 30 point 2 with real pods (RabbitMQ, Redis, nx-27017): a broadcast only tells a
decision, so a pod that missed one learns it from the store, and old broadcasts replayed after a
newer decision change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest

from devstack.broker_users import rabbitmqctl
from herald import names
from herald.domain.messages import CancelCampaign
from herald.domain.status import Status, Verdict
from herald.runtime.worker import PodParts, running_pod
from herald.settings import Settings
from tests.factories import actor, campaign
from tests.integration.helpers import vhost_name
from tests.support import eventually


@pytest.fixture
async def dispatcher(broker_settings: Settings, db: Any, redis: Any
                     ) -> AsyncIterator[PodParts]:
    """A pod of the dispatcher service (its view and its own cancel queue; nothing composed:
    what it knows is what these tests look at)."""
    async with running_pod("dispatcher", broker_settings, acknowledges_cancels=True) as (parts, _):
        yield parts


@pytest.fixture
async def api(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[PodParts]:
    async with running_pod("api", broker_settings, acknowledges_cancels=False) as (parts, _):
        yield parts


async def sending(pod: PodParts) -> str:
    document = campaign(status=Status.IN_PROGRESS)
    await pod.resources.stores.campaigns.insert(document)
    return document.id


async def publish(url: str, message: CancelCampaign) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(names.CANCEL_EXCHANGE, ensure=False)
        await exchange.publish(aio_pika.Message(message.model_dump_json().encode()),
                               routing_key="")


def delete_queue(url: str, queue: str) -> None:
    """What a reconnect does to a pod's exclusive, auto-delete queue: gone, with what it held
    (deleted by the broker's own tool: no other connection may touch an exclusive queue)."""
    rabbitmqctl("delete_queue", "-p", vhost_name(url), queue)


async def test_a_dispatcher_whose_queue_was_gone_during_a_resume_learns_it_from_the_store(
        api: PodParts, dispatcher: PodParts, broker_settings: Settings) -> None:
    campaign_id = await sending(api)
    view = dispatcher.view
    assert await view.verdict(campaign_id) is Verdict.SEND
    await api.decider.pause(campaign_id, "hold", actor("ops"))

    async def held() -> bool:
        return view.known(campaign_id) is Verdict.HOLD

    await eventually(held, timeout_s=5, what="the dispatcher to hold")
    delete_queue(broker_settings.rabbitmq_url, names.pod_cancel_queue(dispatcher.identity.id))
    await api.decider.resume(campaign_id, actor("ops"))  # its broadcast never reaches d

    async def sending_again() -> bool:
        return await view.verdict(campaign_id) is Verdict.SEND

    await eventually(sending_again, timeout_s=1.5, what="the store to tell the resume")


async def test_old_broadcasts_replayed_after_a_resume_change_nothing(
        api: PodParts, dispatcher: PodParts, broker_settings: Settings) -> None:
    campaign_id = await sending(api)
    stores = api.resources.stores
    decided = await api.decider.pause(campaign_id, "hold", actor("ops"))
    pause = decided.campaign.decision
    await api.decider.resume(campaign_id, actor("ops"))
    resumed = await stores.campaigns.get(campaign_id)
    assert pause is not None and resumed is not None and resumed.decision is not None

    async def knows_the_resume() -> bool:
        return dispatcher.view.known(campaign_id) is Verdict.SEND

    await eventually(knows_the_resume, timeout_s=5, what="the resume to be heard")
    old = CancelCampaign(campaign_id=campaign_id, action="pause", reason="hold",
                         decision_id=pause.id, replaces=None)
    for _ in range(3):
        await publish(broker_settings.rabbitmq_url, old)
    marker = await sending(api)  # heard after the replays: they were handled before it
    await publish(broker_settings.rabbitmq_url, CancelCampaign(campaign_id=marker))

    async def marker_heard() -> bool:
        return dispatcher.view.known(marker) is Verdict.STOP

    await eventually(marker_heard, timeout_s=5, what="the marker to be heard")
    assert dispatcher.view.known(campaign_id) is Verdict.SEND
    current = await stores.campaigns.get(campaign_id)
    assert current is not None and current.status is Status.IN_PROGRESS
    assert current.decision == resumed.decision, "nothing more was decided"
    log = await stores.operator_log.page(campaign_id=campaign_id, actor_id=None, before=None,
                                         limit=10)
    assert log == []  # nothing decided by a pod (the decider's calls here log nothing)
