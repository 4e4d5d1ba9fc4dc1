"""The stopping protocol's cancel (``herald/service_layer/stopping/``): what a request decides,
who must stop, and when the settler writes ``cancelled``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    CancelRecord,
    Decision,
    DecisionKind,
    Dispatch,
    Outcome,
    Progress,
    new_id,
)
from herald.domain.status import CancelDecision, Status
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import audit, final_counts
from herald.service_layer.stopping import (
    FCM_REFUSED,
    FLAG_REFRESH_S,
    CampaignNotFound,
    CannotCancel,
    Decider,
    Settler,
)
from herald.service_layer.stopping.settle import FINALIZER_LEASE
from tests.factories import EVERYONE, actor, at, device, insert, pod_beat, recipients
from tests.unit.fakes import (
    FakeBus,
    FakeCampaigns,
    FakeClock,
    FakeFlags,
    FakeRegistry,
    fake_stores,
)


class Stopping:
    """The decider and the settler of one api pod, as the cancel uses them."""

    def __init__(self, stores: Stores, flags: FakeFlags, registry: FakeRegistry,
                 bus: FakeBus) -> None:
        self.stores = stores
        self.settler = Settler(stores, registry, "api-1")
        self.decider = Decider(stores, flags, registry, bus, self.settler.settle)

    async def finish(self, campaign_id: str) -> Campaign | None:
        return await self.settler.settle(campaign_id)

    async def acknowledge(self, campaign_id: str, pod_id: str) -> None:
        """What a pod's acknowledge path does once idle: its ack, then a report."""
        campaign = await stored(self.stores, campaign_id)
        assert campaign.decision is not None
        await self.stores.campaigns.add_ack(campaign_id, campaign.decision, pod_id)
        await self.settler.settle(campaign_id)


@pytest.fixture
def cancellation(stores: Stores, flags: FakeFlags, registry: FakeRegistry,
                 bus: FakeBus) -> Stopping:
    return Stopping(stores, flags, registry, bus)


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def sending(stores: Stores, registry: FakeRegistry, cancellation: Stopping,
                  *busy_pods: str) -> str:
    """A campaign being sent by ``busy_pods``, whose cancel was just asked for."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    for pod_id in busy_pods:
        await registry.beat(pod_beat(pod_id, campaigns=[campaign_id]))
    await cancellation.decider.cancel(campaign_id, "oops", actor("ops"))
    return campaign_id


async def beat_idle_after_the_request(stores: Stores, registry: FakeRegistry, clock: FakeClock,
                                      campaign_id: str, pod_id: str, after_s: float) -> None:
    cancel = (await stored(stores, campaign_id)).cancel
    assert cancel is not None
    clock.set(cancel.requested_at + timedelta(seconds=after_s))
    await registry.beat(pod_beat(pod_id))


# --- asking ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.PENDING])
async def test_a_campaign_not_sending_yet_is_cancelled_at_once_and_flagged(
        stores: Stores, cancellation: Stopping, flags: FakeFlags, bus: FakeBus,
        status: Status) -> None:
    campaign_id = await insert(stores, status=status)
    outcome = await cancellation.decider.cancel(campaign_id, "oops", actor("ops"))
    cancel = outcome.campaign.cancel
    assert (outcome.meaning, outcome.status) == (CancelDecision.AT_ONCE, Status.CANCELLED)
    assert cancel is not None and (cancel.reason, cancel.requested_by) == ("oops", actor("ops"))
    assert cancel.expected_pods == ()  # nothing is sending it: settled before the answer
    assert cancel.acknowledged_at == outcome.campaign.finished_at
    assert outcome.campaign.counts == CampaignCounts()
    assert flags.raised == {campaign_id}


async def test_a_cancel_with_nothing_in_flight_answers_what_another_pods_settle_wrote(
        stores: Stores, flags: FakeFlags, registry: FakeRegistry, bus: FakeBus) -> None:
    """The sweep of a dispatcher came upon the cancelling campaign first and holds its
    finalization lease: the api's own settle writes nothing, yet the answer is the end that
    sweep writes a moment later, not ``cancelling``."""
    other = Settler(stores, registry, "dispatcher-1")
    later: list[asyncio.Task[Campaign | None]] = []

    async def lease_held_elsewhere(campaign_id: str) -> Campaign | None:
        async def settle_soon() -> Campaign | None:
            await asyncio.sleep(0.05)
            return await other.settle(campaign_id)
        later.append(asyncio.create_task(settle_soon()))
        return None

    decider = Decider(stores, flags, registry, bus, lease_held_elsewhere)
    campaign_id = await insert(stores, status=Status.SCHEDULED)
    outcome = await decider.cancel(campaign_id, "oops", actor("ops"))
    assert (outcome.meaning, outcome.campaign.status) == (CancelDecision.AT_ONCE,
                                                          Status.CANCELLED)
    await asyncio.gather(*later)


@pytest.mark.parametrize("status", [Status.IN_PROGRESS, Status.FINALIZING])
async def test_a_sending_campaign_starts_cancelling_and_every_pod_is_told(
        stores: Stores, cancellation: Stopping, flags: FakeFlags, bus: FakeBus,
        registry: FakeRegistry, status: Status) -> None:
    for pod_id, service in (("s1", "sender"), ("d1", "dispatcher"), ("a1", "api"),
                            ("c1", "scheduler")):
        await registry.beat(pod_beat(pod_id, service))
    campaign_id = await insert(stores, status=status)
    outcome = await cancellation.decider.cancel(campaign_id, "oops", actor("ops"))
    cancel = outcome.campaign.cancel
    assert (outcome.meaning, outcome.status) == (CancelDecision.STOP_PODS, Status.CANCELLING)
    assert cancel is not None and cancel.expected_pods == ("d1", "s1")
    assert cancel.acknowledged_at is None and outcome.campaign.finished_at is None
    assert flags.raised == {campaign_id}
    assert [(m.campaign_id, m.reason, m.requested_by) for m in bus.cancels] == [
        (campaign_id, "oops", actor("ops").label)]


class ClaimedWhileCancelled(FakeCampaigns):
    """A dispatcher claims the campaign between the cancel's read and its conditional write."""

    async def begin_cancel(self, campaign_id: str, record: CancelRecord, decision: Decision,
                           *, after: Decision | None, status: Status) -> Campaign | None:
        now = utcnow()
        if record.expected_pods == ():  # the first try, decided on the pending campaign
            await self.claim_for_dispatch(campaign_id, "d1", now, now + FINALIZER_LEASE)
        return await super().begin_cancel(campaign_id, record, decision, after=after,
                                          status=status)


async def test_a_campaign_claimed_while_being_cancelled_has_its_pods_stopped(
        flags: FakeFlags, registry: FakeRegistry, bus: FakeBus) -> None:
    stores = replace(fake_stores(), campaigns=ClaimedWhileCancelled())
    campaign_id = await insert(stores)
    await registry.beat(pod_beat("d1", "dispatcher"))
    outcome = await Stopping(stores, flags, registry, bus).decider.cancel(campaign_id, None, None)
    assert (outcome.meaning, outcome.status) == (CancelDecision.STOP_PODS, Status.CANCELLING)
    assert outcome.campaign.cancel is not None
    assert outcome.campaign.cancel.expected_pods == ("d1",)
    assert [m.campaign_id for m in bus.cancels] == [campaign_id]


async def test_a_broadcast_names_the_decision_it_tells(
        stores: Stores, cancellation: Stopping, bus: FakeBus) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    outcome = await cancellation.decider.cancel(campaign_id, None, None)
    decision = outcome.campaign.decision
    assert decision is not None and decision.kind is DecisionKind.CANCEL
    assert outcome.campaign.cancel is not None
    assert outcome.campaign.cancel.decision_id == decision.id
    assert [(m.action, m.decision_id) for m in bus.cancels] == [("cancel", decision.id)]


async def test_repeated_cancels_change_nothing_and_broadcast_once(
        stores: Stores, cancellation: Stopping, bus: FakeBus) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    first = await cancellation.decider.cancel(campaign_id, "first", actor("a"))
    again = await cancellation.decider.cancel(campaign_id, "second", actor("b"))
    assert (again.meaning, again.campaign) == (CancelDecision.ALREADY, first.campaign)
    assert len(bus.cancels) == 1


async def test_cancelling_a_cancelled_campaign_is_idempotent(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await insert(stores)
    await cancellation.decider.cancel(campaign_id, None, None)
    again = await cancellation.decider.cancel(campaign_id, None, None)
    assert (again.meaning, again.status) == (CancelDecision.ALREADY, Status.CANCELLED)


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.MISSED])
async def test_a_finished_campaign_refuses_a_cancel(stores: Stores, cancellation: Stopping,
                                                    flags: FakeFlags, status: Status) -> None:
    campaign_id = await insert(stores, status=status)
    with pytest.raises(CannotCancel) as refused:
        await cancellation.decider.cancel(campaign_id, None, None)
    assert refused.value.status is status
    assert (await stored(stores, campaign_id)).status is status and flags.raised == set()


async def test_an_unknown_campaign_is_not_found(cancellation: Stopping) -> None:
    with pytest.raises(CampaignNotFound):
        await cancellation.decider.cancel(new_id(), None, None)


async def test_with_redis_away_a_cancel_still_starts_and_waits_for_every_live_pod(
        stores: Stores, cancellation: Stopping, flags: FakeFlags,
        registry: FakeRegistry) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    registry.away = flags.away = True
    outcome = await cancellation.decider.cancel(campaign_id, None, None)
    assert outcome.status is Status.CANCELLING and outcome.campaign.cancel is not None
    assert outcome.campaign.cancel.expected_pods is None
    registry.away = flags.away = False
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    await registry.beat(pod_beat("newcomer"))  # alive now: it may have been sending then
    assert await cancellation.finish(campaign_id) is None
    await cancellation.acknowledge(campaign_id, "s1")
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING
    await cancellation.acknowledge(campaign_id, "newcomer")
    assert (await stored(stores, campaign_id)).status is Status.CANCELLED


async def test_with_rabbitmq_away_a_cancel_still_starts_and_the_flag_tells_the_pods(
        stores: Stores, cancellation: Stopping, flags: FakeFlags, bus: FakeBus) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    bus.away = True
    outcome = await cancellation.decider.cancel(campaign_id, None, None)
    assert outcome.status is Status.CANCELLING and flags.raised == {campaign_id}


# --- finishing -------------------------------------------------------------------------------------
async def test_the_cancel_is_done_once_every_expected_pod_acknowledged(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry) -> None:
    campaign_id = await sending(stores, registry, cancellation, "s1", "s2")
    await cancellation.acknowledge(campaign_id, "s1")
    halfway = await stored(stores, campaign_id)
    await cancellation.acknowledge(campaign_id, "s2")
    done = await stored(stores, campaign_id)
    assert halfway.status is Status.CANCELLING and halfway.cancel is not None
    assert halfway.cancel.acks == ("s1",)
    assert done.status is Status.CANCELLED and done.cancel is not None
    assert done.cancel.acknowledged_at is not None and done.finished_at is not None


async def test_the_cancel_waits_for_an_expected_pod_that_is_alive_and_busy(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry) -> None:
    campaign_id = await sending(stores, registry, cancellation, "s1")
    assert await cancellation.finish(campaign_id) is None
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING


async def test_a_pod_whose_heartbeat_stopped_is_not_waited_for(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry) -> None:
    campaign_id = await sending(stores, registry, cancellation, "s1", "s2")
    await cancellation.acknowledge(campaign_id, "s1")
    await registry.remove("s2")  # its heartbeat expired: it died
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED


async def test_a_pod_seen_idle_after_the_request_is_not_waited_for(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry,
        clock: FakeClock) -> None:
    campaign_id = await sending(stores, registry, cancellation, "s1")
    await beat_idle_after_the_request(stores, registry, clock, campaign_id, "s1",
                                      after_s=FLAG_REFRESH_S + 0.5)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED


async def test_an_idle_beat_within_a_second_of_the_request_proves_nothing(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry,
        clock: FakeClock) -> None:
    """It may predate the chunk the pod took just before it heard of the cancel."""
    campaign_id = await sending(stores, registry, cancellation, "s1")
    await beat_idle_after_the_request(stores, registry, clock, campaign_id, "s1",
                                      after_s=FLAG_REFRESH_S - 0.5)
    assert await cancellation.finish(campaign_id) is None


async def test_a_pod_that_started_sending_after_the_request_is_waited_for(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry,
        clock: FakeClock) -> None:
    campaign_id = await sending(stores, registry, cancellation)
    await registry.beat(pod_beat("newcomer", campaigns=[campaign_id]))
    assert await cancellation.finish(campaign_id) is None
    await beat_idle_after_the_request(stores, registry, clock, campaign_id, "newcomer",
                                      after_s=FLAG_REFRESH_S + 0.5)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED


async def test_only_one_pod_writes_the_final_counts(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry) -> None:
    campaign_id = await sending(stores, registry, cancellation)
    now = utcnow()
    assert await stores.campaigns.claim_cancel_finalization(campaign_id, "other", now,
                                                            now + FINALIZER_LEASE)
    assert await cancellation.finish(campaign_id) is None
    assert (await stored(stores, campaign_id)).status is Status.CANCELLING


async def test_a_campaign_that_is_not_cancelling_is_not_finalized(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    assert await cancellation.finish(campaign_id) is None
    assert await cancellation.finish(new_id()) is None
    assert (await stored(stores, campaign_id)).status is Status.IN_PROGRESS


async def test_a_cancelled_campaign_counts_what_was_recorded_and_the_rest_beyond_its_cursor(
        stores: Stores, cancellation: Stopping) -> None:
    """Paging stopped after one chunk of five: two sent, one failed. The seven devices never
    paged are counted where they are, beyond the checkpoint, at the cancel; the audit lists
    them from there. A device retired after the cancel stays counted but is no longer listed
    (as an erased person's recipients are), and nothing is written for the rest."""
    await stores.devices.upsert([device(i) for i in range(12)], utcnow())
    ids = [i async for i, _ in stores.devices.stream(EVERYONE, None, None)]
    campaign_id = await insert(
        stores, status=Status.IN_PROGRESS, chunk_size=3, counts=CampaignCounts(targeted=5),
        progress=Progress(chunks_published=1),
        dispatch=Dispatch(owner="d1", until=ids[-1], next_seq=1))
    recipients = [r async for _, r in stores.devices.stream(EVERYONE, None, ids[4])]
    await stores.chunks.create(campaign_id, 0, recipients, ids[4], utcnow())
    await stores.deliveries.record(campaign_id, 0, "s1", at([(0, None), (1, None),
                                                          (2, "UNREGISTERED")]), utcnow())
    await cancellation.decider.cancel(campaign_id, None, None)
    cancelled = await cancellation.finish(campaign_id)
    listed = [line.token async for line in audit(stores, await stored(stores, campaign_id),
                                                 Outcome.UNSENT)]
    await stores.devices.mark_invalid(["tok-00006"], "UNREGISTERED", utcnow())
    later = await stored(stores, campaign_id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED
    assert cancelled.counts == CampaignCounts(targeted=12, sent=2, failed=1)
    assert not cancelled.dispatch.done
    assert listed == [f"tok-{i:05d}" for i in range(3, 12)]
    assert [line.token async for line in audit(stores, later, Outcome.UNSENT)] == [
        f"tok-{i:05d}" for i in (3, 4, 5, 7, 8, 9, 10, 11)]
    assert (await final_counts(stores, later)).counts == cancelled.counts
    assert [c.seq async for c in stores.chunks.in_order(campaign_id)] == [0]


async def test_a_finalizer_that_died_is_replaced_once_its_claim_expires(
        stores: Stores, cancellation: Stopping) -> None:
    """A finalizer claimed the cancel and died; its claim expires, and the next one counts
    the whole audience, never paged, where it is."""
    await stores.devices.upsert([device(i) for i in range(6)], utcnow())
    ids = [i async for i, _ in stores.devices.stream(EVERYONE, None, None)]
    campaign_id = await insert(stores, status=Status.IN_PROGRESS, chunk_size=2,
                               dispatch=Dispatch(owner="d1", until=ids[-1], next_seq=0))
    await cancellation.decider.cancel(campaign_id, None, None)
    earlier = utcnow() - 2 * FINALIZER_LEASE
    await stores.campaigns.claim_cancel_finalization(campaign_id, "dead", earlier, earlier)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None and cancelled.counts == CampaignCounts(targeted=6)
    assert [c async for c in stores.chunks.in_order(campaign_id)] == []


async def test_final_counts_of_a_cancel_come_from_the_records_not_the_live_counters(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS,
                               dispatch=Dispatch(owner="d1", next_seq=1, done=True),
                               counts=CampaignCounts(targeted=2, sent=99))
    await stores.chunks.create(campaign_id, 0, recipients(0, 2), None, utcnow())
    await stores.deliveries.record(campaign_id, 0, "s1", at([(0, None)]), utcnow())
    await cancellation.decider.cancel(campaign_id, None, None)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None and cancelled.counts == CampaignCounts(targeted=2, sent=1, failed=0)


# --- a campaign FCM refused as misconfigured ---------------------------------------------------------
async def test_a_campaign_fcm_refuses_is_stopped_like_a_cancel_and_ends_failed_with_the_reason(
        stores: Stores, cancellation: Stopping, registry: FakeRegistry, flags: FakeFlags,
        bus: FakeBus) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    await registry.beat(pod_beat("s1", campaigns=[campaign_id]))
    reason = "FCM refused the campaign: PERMISSION_DENIED: Permission denied"
    stopping = await cancellation.decider.stop_for_error(campaign_id, reason)
    assert stopping is not None and stopping.status is Status.CANCELLING
    assert stopping.cancel is not None and stopping.cancel.requested_by == FCM_REFUSED
    assert flags.raised == {campaign_id} and len(bus.cancels) == 1
    await cancellation.acknowledge(campaign_id, "s1")
    done = await stored(stores, campaign_id)
    assert done.status is Status.FAILED and done.error == reason
    assert done.finished_at is not None


@pytest.mark.parametrize("status", [Status.CANCELLING, Status.COMPLETED, Status.PENDING])
async def test_a_campaign_not_sending_is_left_as_it_is_by_a_stop(
        stores: Stores, cancellation: Stopping, status: Status) -> None:
    campaign_id = await insert(stores, status=status)
    assert await cancellation.decider.stop_for_error(campaign_id, "r") is None
    assert (await stored(stores, campaign_id)).status is status


async def test_a_users_cancel_during_a_stop_keeps_the_stop_and_its_failure(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    await cancellation.decider.stop_for_error(campaign_id, "r")
    outcome = await cancellation.decider.cancel(campaign_id, "also", actor("ops"))
    assert outcome.meaning is CancelDecision.ALREADY
    await cancellation.finish(campaign_id)
    assert (await stored(stores, campaign_id)).status is Status.FAILED
