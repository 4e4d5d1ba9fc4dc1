"""The cancel protocol across pods (docs/cancel-protocol.md), on fakes: the guarded transition
decides once, whoever hears the broadcast only stops and acknowledges, and ``finish`` is the one
code that writes ``cancelled``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.domain.access import amqp_actor
from herald.domain.documents import Campaign
from herald.domain.messages import CancelCampaign
from herald.domain.status import Status
from herald.runtime.cancel_listener import CancelListener
from herald.runtime.tracking import WorkTracker
from herald.service_layer.access import OperatorLog
from herald.service_layer.cancel_watch import CancelWatch
from herald.service_layer.cancellation import Cancellation
from herald.service_layer.pausing import Pausing
from herald.service_layer.ports import Stores
from tests.factories import actor, insert, pod_beat
from tests.unit.fakes import FakeBackground, FakeBus, FakeFlags, FakeRegistry


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


class Pod:
    """One pod's cancel listener over the shared fakes (the broadcast delivered by hand)."""

    def __init__(self, pod_id: str, stores: Stores, flags: FakeFlags, registry: FakeRegistry,
                 bus: FakeBus, *, acknowledges: bool) -> None:
        self.background = FakeBackground()  # where the listener acknowledges once idle
        self.finishes = FakeBackground()
        self.cancellation = Cancellation(stores, flags, registry, bus, pod_id,
                                         spawn=self.finishes.spawn)
        self.watch = CancelWatch(flags)
        self.pausing = Pausing(stores, registry, bus, pod_id, spawn=self.finishes.spawn)
        self.listener = CancelListener(
            self.watch, self.cancellation, self.pausing, WorkTracker(),
            self.background,  # type: ignore[arg-type]
            OperatorLog(stores.operator_log), pod_id=pod_id, acknowledges=acknowledges,
            grace_s=1.0, first_copy=_always_first)

    async def hear(self, command: CancelCampaign) -> None:
        await self.listener.handle(command, amqp_actor("ops-tool", None))

    async def settle(self) -> list[str]:
        """Run the acknowledgements this pod spawned (then any finish they reported)."""
        return await self.background.run() + await self.finishes.run()

    def close(self) -> None:
        self.background.close()
        self.finishes.close()


async def _always_first(_body: bytes) -> bool:
    return True


@pytest.fixture
def pods(stores: Stores, flags: FakeFlags, registry: FakeRegistry,
         bus: FakeBus) -> Iterator[tuple[Pod, Pod, Pod]]:
    """An api, a sender and a dispatcher."""
    fleet = (Pod("api-1", stores, flags, registry, bus, acknowledges=False),
             Pod("s1", stores, flags, registry, bus, acknowledges=True),
             Pod("d1", stores, flags, registry, bus, acknowledges=True))
    yield fleet
    for pod in fleet:
        pod.close()


async def test_a_cancel_published_by_any_amqp_tool_is_decided_once_by_a_pod_that_hears_it(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    api, sender, dispatcher = pods
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    await registry.beat(pod_beat("d1", "dispatcher"))
    command = CancelCampaign(campaign_id=campaign_id, reason="broken link")
    for pod in (sender, api, dispatcher):
        await pod.hear(command)
    campaign = await stored(stores, campaign_id)
    assert campaign.status is Status.CANCELLING and campaign.cancel is not None
    assert campaign.cancel.expected_pods == ("d1", "s1")
    assert bus.cancels == []  # heard on the broadcast: not broadcast again
    entries = await stores.operator_log.page(campaign_id=campaign_id, actor_id=None, before=None,
                                             limit=10)
    assert len(entries) == 1  # one decider: the first pod that heard it
    assert [pod.watch.knows(campaign_id) for pod in (api, sender, dispatcher)] == [True] * 3
    assert await api.settle() == []  # the api stops nothing and acknowledges nothing
    # the sender heard it first and decided: its report to the finisher finds d1 still stopping
    assert await sender.settle() == [f"ack-{campaign_id}", f"finish-cancel-{campaign_id}"]
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING
    assert await dispatcher.settle() == [f"ack-{campaign_id}"]  # the last acknowledgement
    finished = await stored(stores, campaign_id)
    assert finished.status is Status.CANCELLED
    assert finished.cancel is not None and set(finished.cancel.acks) == {"s1", "d1"}


async def test_a_pod_that_hears_a_decided_cancel_never_finishes_it(
        stores: Stores, bus: FakeBus, pods: tuple[Pod, Pod, Pod]) -> None:
    """Only the deciding pod reports to the finisher; the others only stop."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    deciding, listening, _ = pods
    await deciding.cancellation.request(campaign_id, None, actor("ops"), broadcast=True)
    await listening.hear(bus.cancels[0])
    assert listening.finishes.spawned == []
    assert [name for name, _ in deciding.finishes.spawned] == [f"finish-cancel-{campaign_id}"]


async def test_a_decision_with_nobody_to_wait_for_is_finished_by_the_deciders_report(
        stores: Stores, flags: FakeFlags, registry: FakeRegistry, bus: FakeBus,
        background: FakeBackground) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    cancellation = Cancellation(stores, flags, registry, bus, "api-1", spawn=background.spawn)
    outcome = await cancellation.request(campaign_id, None, actor("ops"), broadcast=True)
    assert outcome.status is Status.CANCELLING
    assert await background.run() == [f"finish-cancel-{campaign_id}"]
    assert (await stored(stores, campaign_id)).status is Status.CANCELLED


async def test_with_a_pod_still_sending_the_deciders_report_finishes_nothing(
        stores: Stores, flags: FakeFlags, registry: FakeRegistry, bus: FakeBus,
        background: FakeBackground) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    cancellation = Cancellation(stores, flags, registry, bus, "api-1", spawn=background.spawn)
    await cancellation.request(campaign_id, None, actor("ops"), broadcast=True)
    await background.run()
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING
    await cancellation.acknowledge(campaign_id, "s1")  # the last acknowledgement finishes
    assert (await stored(stores, campaign_id)).status is Status.CANCELLED


async def test_a_stop_for_an_fcm_refusal_is_reported_to_the_same_finisher(
        stores: Stores, flags: FakeFlags, registry: FakeRegistry, bus: FakeBus,
        background: FakeBackground) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    cancellation = Cancellation(stores, flags, registry, bus, "s1", spawn=background.spawn)
    await cancellation.stop_for_error(campaign_id, "FCM refused the campaign: SENDER_ID_MISMATCH")
    await background.run()
    done = await stored(stores, campaign_id)
    assert done.status is Status.FAILED and done.error is not None


async def test_a_pause_published_by_any_amqp_tool_is_decided_once_and_settled_by_the_last_ack(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    """Issue 24: ``"action": "pause"`` on herald.cancel does what POST .../pause does."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    api, sender, dispatcher = pods
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    await registry.beat(pod_beat("d1", "dispatcher"))
    command = CancelCampaign(campaign_id=campaign_id, reason="complaints", action="pause")
    for pod in (sender, api, dispatcher):
        await pod.hear(command)
    campaign = await stored(stores, campaign_id)
    assert campaign.status is Status.PAUSED and campaign.pause is not None
    assert campaign.pause.expected_pods == ("d1", "s1") and campaign.cancel is None
    assert bus.cancels == []  # heard on the broadcast: not broadcast again
    entries = await stores.operator_log.page(campaign_id=campaign_id, actor_id=None, before=None,
                                             limit=10)
    assert [e.action for e in entries] == ["campaign.pause"]  # one decider
    assert [pod.watch.is_paused(campaign_id) for pod in (api, sender, dispatcher)] == [True] * 3
    assert not any(pod.watch.knows(campaign_id) for pod in (api, sender, dispatcher))
    assert await api.settle() == []
    await sender.settle()
    assert (await stored(stores, campaign_id)).pause.settled_at is None  # type: ignore[union-attr]
    await dispatcher.settle()  # the last acknowledgement settles it
    settled = await stored(stores, campaign_id)
    assert settled.pause is not None and settled.pause.settled_at is not None
    assert set(settled.pause.acks) == {"s1", "d1"}

    await sender.pausing.resume(campaign_id, actor("ops"))
    resume = CancelCampaign(campaign_id=campaign_id, action="resume")
    for pod in (api, sender, dispatcher):
        await pod.hear(resume)
    assert not any(pod.watch.is_paused(campaign_id) for pod in (api, sender, dispatcher))
    assert not any(pod.watch.event(campaign_id).is_set() for pod in (api, sender, dispatcher))
