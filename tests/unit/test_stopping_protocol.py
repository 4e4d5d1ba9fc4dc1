"""The stopping protocol across pods (docs/cancel-protocol.md), on fakes: each pod is what
``herald.runtime.worker.build_parts`` makes of it (its view, decider, settler, acknowledge path
and listener); broadcasts are delivered by hand, in any order, late or twice.

What must hold: a decision is made once and a broadcast only tells it (a late or repeated one
changes nothing); an outside tool's request is decided once however many pods hear it; a pod that
missed a resume or a pause learns it from the store; the settler alone writes every end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.clock import utcnow
from herald.domain.access import amqp_actor
from herald.domain.documents import Campaign, CancelRecord, Decision, DecisionKind, new_id
from herald.domain.messages import CancelCampaign
from herald.domain.status import Status, Transition, Verdict
from herald.runtime.cancel_listener import CancelListener
from herald.runtime.tracking import WorkTracker
from herald.service_layer.access import OperatorLog
from herald.service_layer.ports import Stores
from herald.service_layer.stopping import Acknowledger, Decider, PodView, Settler
from tests.factories import actor, insert, pod_beat
from tests.unit.fakes import FakeBackground, FakeBus, FakeClock, FakeFlags, FakeRegistry


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


class Requests:
    """Redis' ``SET NX`` that tells the first pod to see an outside tool's message."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()

    async def first(self, body: bytes) -> bool:
        fresh = body not in self.seen
        self.seen.add(body)
        return fresh


class Pod:
    """One pod of the stopping protocol over the shared fakes."""

    def __init__(self, pod_id: str, stores: Stores, flags: FakeFlags, registry: FakeRegistry,
                 bus: FakeBus, requests: Requests, clock: FakeClock, *,
                 acknowledges: bool) -> None:
        self.background = FakeBackground()
        self.settler = Settler(stores, registry, pod_id)
        self.clock_s = 0.0
        self.view = PodView(stores.campaigns, flags, clock=lambda: self.clock_s)
        self.decider = Decider(stores, flags, registry, bus, self.settler.settle,
                               spawn=self.background.spawn)
        self.view.on_decision(Acknowledger(
            stores.campaigns, self.settler.settle, WorkTracker(), self.background.spawn,
            pod_id=pod_id, grace_s=1.0, acknowledges=acknowledges).decided)
        self.listener = CancelListener(self.view, self.decider, OperatorLog(stores.operator_log),
                                       first_copy=requests.first, first_request=requests.first)

    async def hear(self, command: CancelCampaign, body: bytes | None = None) -> None:
        seen = body if body is not None else command.model_dump_json().encode()
        await self.listener.handle(command, amqp_actor("ops-tool", None), seen)

    async def settle(self) -> list[str]:
        """Run what this pod spawned: its acknowledgements, its reports to the settler."""
        return await self.background.run()

    def later(self, seconds: float) -> None:
        self.clock_s += seconds


@pytest.fixture
def requests() -> Requests:
    return Requests()


@pytest.fixture
def pods(stores: Stores, flags: FakeFlags, registry: FakeRegistry, bus: FakeBus,
         requests: Requests, clock: FakeClock) -> Iterator[tuple[Pod, Pod, Pod]]:
    """An api, a sender and a dispatcher."""
    fleet = (Pod("api-1", stores, flags, registry, bus, requests, clock, acknowledges=False),
             Pod("s1", stores, flags, registry, bus, requests, clock, acknowledges=True),
             Pod("d1", stores, flags, registry, bus, requests, clock, acknowledges=True))
    yield fleet
    for pod in fleet:
        pod.background.close()


async def sending(stores: Stores, registry: FakeRegistry) -> str:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    await registry.beat(pod_beat("d1", "dispatcher"))
    return campaign_id


async def deliver(bus: FakeBus, pods: tuple[Pod, ...], start: int = 0) -> None:
    """Every broadcast from ``start`` on, to every pod, in order."""
    for command in bus.cancels[start:]:
        for pod in pods:
            await pod.hear(command)


# --- an outside tool's request ---------------------------------------------------------------
async def test_a_cancel_published_by_any_amqp_tool_is_decided_once_then_told_like_any_other(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, dispatcher = pods
    command = CancelCampaign(campaign_id=campaign_id, reason="broken link")
    for pod in (sender, api, dispatcher):
        await pod.hear(command)
    campaign = await stored(stores, campaign_id)
    assert campaign.status is Status.CANCELLING and campaign.cancel is not None
    assert campaign.cancel.expected_pods == ("d1", "s1")
    assert campaign.decision is not None
    assert [(m.action, m.decision_id) for m in bus.cancels] == [("cancel", campaign.decision.id)]
    entries = await stores.operator_log.page(campaign_id=campaign_id, actor_id=None, before=None,
                                             limit=10)
    assert len(entries) == 1  # one decider: the first pod that saw it
    await deliver(bus, pods)
    assert [pod.view.known(campaign_id) for pod in pods] == [Verdict.STOP] * 3
    assert await api.settle() == []  # the api acknowledges nothing
    await sender.settle()
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING
    await dispatcher.settle()  # the last acknowledgement: the settler writes the end
    finished = await stored(stores, campaign_id)
    assert finished.status is Status.CANCELLED
    assert finished.cancel is not None and set(finished.cancel.acks) == {"s1", "d1"}


async def test_a_pause_published_twice_by_a_tool_is_one_pause(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    """The same message delivered again (every pod's copy, a tool that retries) is decided
    once; a resume after it is not undone by the late copies."""
    campaign_id = await sending(stores, registry)
    api = pods[0]
    pause = CancelCampaign(campaign_id=campaign_id, reason="complaints", action="pause")
    for pod in pods:
        await pod.hear(pause)
    await deliver(bus, pods)
    for pod in pods:
        await pod.settle()
    await api.decider.resume(campaign_id, actor("ops"))
    for pod in pods:  # late copies of the tool's message
        await pod.hear(pause)
    campaign = await stored(stores, campaign_id)
    entries = await stores.operator_log.page(campaign_id=campaign_id, actor_id=None, before=None,
                                             limit=10)
    assert campaign.status is Status.IN_PROGRESS
    assert [e.action for e in entries] == ["campaign.pause"]


# --- late and repeated broadcasts --------------------------------------------------------------
async def test_old_broadcasts_after_a_resume_change_nothing(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    """20 times (pause, resume) decided by the api; every broadcast then reaches the pods late, in
    order, twice: nothing more is decided, and every pod ends up sending."""
    campaign_id = await sending(stores, registry)
    api = pods[0]
    for _ in range(20):
        await api.decider.pause(campaign_id, "hold", actor("ops"))
        await api.decider.resume(campaign_id, actor("ops"))
    await deliver(bus, pods)
    await deliver(bus, pods)
    campaign = await stored(stores, campaign_id)
    assert campaign.status is Status.IN_PROGRESS
    assert [m.action for m in bus.cancels] == ["pause", "resume"] * 20
    assert [pod.view.known(campaign_id) for pod in pods] == [Verdict.SEND] * 3
    assert not any(pod.view.event(campaign_id).is_set() for pod in pods)


@pytest.mark.parametrize("order", ["told", "late", "missed"])
async def test_a_pause_reaches_every_pod_however_its_broadcast_arrives(
        stores: Stores, registry: FakeRegistry, bus: FakeBus, pods: tuple[Pod, Pod, Pod],
        order: str) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, _ = pods
    assert await sender.view.verdict(campaign_id) is Verdict.SEND
    await api.decider.pause(campaign_id, None, actor("ops"))
    if order == "told":
        await sender.hear(bus.cancels[-1])
    elif order == "late":
        await api.decider.resume(campaign_id, actor("ops"))
        await sender.hear(bus.cancels[0])  # the pause's broadcast, after the resume...
        await sender.hear(bus.cancels[1])  # ...then the resume's, in the order published
        assert sender.view.known(campaign_id) is Verdict.SEND
        return
    else:
        assert await sender.view.verdict(campaign_id) is Verdict.SEND  # memory, still fresh
        sender.later(1.0)
    assert await sender.view.verdict(campaign_id) is Verdict.HOLD


async def test_a_late_pause_whose_resume_never_arrives_is_undone_by_the_store(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    """The pause replaced what s1 knew, so s1 held at once; the store says resumed, and s1
    reads it within the hold's refresh."""
    campaign_id = await sending(stores, registry)
    api, sender, _ = pods
    assert await sender.view.verdict(campaign_id) is Verdict.SEND
    await api.decider.pause(campaign_id, None, actor("ops"))
    await api.decider.resume(campaign_id, actor("ops"))
    await sender.hear(bus.cancels[0])
    sender.later(1.0)
    assert await sender.view.verdict(campaign_id) is Verdict.SEND


async def test_a_pause_that_replaces_what_a_pod_knows_holds_it_without_a_read(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, _ = pods
    assert await sender.view.verdict(campaign_id) is Verdict.SEND
    await api.decider.pause(campaign_id, None, actor("ops"))
    await stores.campaigns.transition(campaign_id, Transition.RESUME, utcnow())  # not read
    await sender.hear(bus.cancels[-1])
    assert sender.view.known(campaign_id) is Verdict.HOLD


async def test_a_pod_that_missed_a_resume_learns_it_from_the_store(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, _ = pods
    await api.decider.pause(campaign_id, None, actor("ops"))
    await sender.hear(bus.cancels[-1])
    assert sender.view.event(campaign_id).is_set()
    await api.decider.resume(campaign_id, actor("ops"))  # its broadcast never reaches s1
    sender.later(1.0)
    assert await sender.view.verdict(campaign_id) is Verdict.SEND
    assert not sender.view.event(campaign_id).is_set()


async def test_a_stop_is_never_undone_by_a_later_read(
        stores: Stores, registry: FakeRegistry, pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    sender = pods[1]
    sender.view.stop_here(campaign_id)  # FCM refused it here
    campaign = await stored(stores, campaign_id)
    assert sender.view.learn(campaign) is Verdict.STOP
    sender.later(5.0)
    assert await sender.view.verdict(campaign_id) is Verdict.STOP


@pytest.mark.parametrize("status", list(Status))
async def test_the_verdict_of_a_campaign_read_in_every_status(
        stores: Stores, pods: tuple[Pod, Pod, Pod], status: Status) -> None:
    campaign_id = await insert(stores, status=status)
    verdict = await pods[1].view.verdict(campaign_id)
    assert verdict is (Verdict.SEND if status in (Status.IN_PROGRESS, Status.FINALIZING) else
                       Verdict.HOLD if status in (Status.PAUSED, Status.PENDING,
                                                  Status.SCHEDULED, Status.AWAITING_APPROVAL)
                       else Verdict.STOP)
    assert pods[1].view.event(campaign_id).is_set() is (verdict is not Verdict.SEND)


# --- the settler reported to ------------------------------------------------------------------
async def test_a_decision_with_nobody_to_wait_for_is_settled_by_the_deciders_report(
        stores: Stores, pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    api = pods[0]
    outcome = await api.decider.cancel(campaign_id, None, actor("ops"))
    assert outcome.status is Status.CANCELLING
    assert await api.settle() == [f"settle-{campaign_id}"]
    assert (await stored(stores, campaign_id)).status is Status.CANCELLED


async def test_a_pod_that_hears_a_decision_reports_only_its_acknowledgement(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, _ = pods
    await api.decider.cancel(campaign_id, None, actor("ops"))
    await sender.hear(bus.cancels[0])
    assert [name for name, _ in sender.background.spawned] == [
        f"ack-{(await stored(stores, campaign_id)).cancel.decision_id}"]  # type: ignore[union-attr]


async def test_a_stop_for_an_fcm_refusal_is_settled_failed_by_the_same_settler(
        stores: Stores, pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    sender = pods[1]
    await sender.decider.stop_for_error(campaign_id, "FCM refused the campaign: X")
    await sender.settle()
    done = await stored(stores, campaign_id)
    assert done.status is Status.FAILED and done.error == "FCM refused the campaign: X"
    assert done.decision is not None and done.decision.kind is DecisionKind.STOP


async def test_a_pause_is_settled_by_the_last_acknowledgement_then_resumed(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    campaign_id = await sending(stores, registry)
    api, sender, dispatcher = pods
    await api.decider.pause(campaign_id, "complaints", actor("ops"))
    await deliver(bus, pods)
    await api.settle()
    await sender.settle()
    assert (await stored(stores, campaign_id)).pause.settled_at is None  # type: ignore[union-attr]
    await dispatcher.settle()
    settled = await stored(stores, campaign_id)
    assert settled.pause is not None and settled.pause.settled_at is not None
    assert set(settled.pause.acks) == {"s1", "d1"}
    resumed = await api.decider.resume(campaign_id, actor("ops"))
    assert resumed.status is Status.IN_PROGRESS and resumed.pause is not None
    assert resumed.pause.resume_id == resumed.decision.id  # type: ignore[union-attr]
    assert resumed.pause.offered_at is None  # the sweep offers its kept chunks


async def test_a_cancel_racing_the_resume_of_a_settled_pause_waits_for_the_senders(
        stores: Stores, registry: FakeRegistry, bus: FakeBus,
        pods: tuple[Pod, Pod, Pod]) -> None:
    """The cancel read the campaign paused with nothing in flight; the resume won: the cancel's
    guarded write fails, it reads again, and it waits for the pods that send again."""
    campaign_id = await sending(stores, registry)
    api = pods[0]
    await api.decider.pause(campaign_id, None, actor("ops"))
    await deliver(bus, pods)
    for pod in pods:
        await pod.settle()
    paused = await stored(stores, campaign_id)
    await api.decider.resume(campaign_id, actor("ops"))
    late = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
    assert await stores.campaigns.begin_cancel(
        campaign_id, CancelRecord(requested_at=late.at, expected_pods=()), late,
        after=paused.decision, status=paused.status) is None  # decided on the paused reading
    outcome = await api.decider.cancel(campaign_id, None, actor("ops"))
    assert outcome.status is Status.CANCELLING
    assert outcome.campaign.cancel is not None
    assert outcome.campaign.cancel.expected_pods == ("d1", "s1")
