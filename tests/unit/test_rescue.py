"""Chunks held by a sender whose heartbeat expired are offered again to the live senders by the
dispatchers' sweep (herald/service_layer/sending/rescue.py), once per holder and token."""

from __future__ import annotations

from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.messages import SendChunk
from herald.domain.rollout import RolloutProgress
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from herald.service_layer.sending.rescue import READ_ALL_FROM, rescue_chunks_of_dead_senders
from tests.factories import pod_beat, sending_campaign
from tests.unit.fakes import FakeBus, FakeRegistry

OFFER_AGAIN_AFTER = timedelta(seconds=12)


async def rescue(stores: Stores, registry: FakeRegistry, bus: FakeBus, later_s: float = 0) -> int:
    return await rescue_chunks_of_dead_senders(stores.campaigns, stores.chunks, registry, bus,
                                               utcnow() + timedelta(seconds=later_s),
                                               OFFER_AGAIN_AFTER)


async def test_a_chunk_held_by_a_sender_without_a_heartbeat_is_offered_once(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    campaign = await sending_campaign(stores, [["a", "b"], ["c"], ["d"]])
    await registry.beat(pod_beat("alive"))
    until = utcnow() + timedelta(minutes=5)
    await stores.chunks.claim(campaign.id, 0, "frozen", None, until)
    await stores.chunks.claim(campaign.id, 1, "alive", None, until)
    assert await rescue(stores, registry, bus) == 1
    [offered] = bus.chunks
    assert (offered.campaign_id, offered.seq, [r.token for r in offered.recipients]) == (
        campaign.id, 0, ["a", "b"])
    assert await rescue(stores, registry, bus) == 0  # offered already: not again at once
    assert await rescue(stores, registry, bus,
                        later_s=OFFER_AGAIN_AFTER.total_seconds() + 1) == 1  # the copy was lost?


async def test_a_chunk_taken_over_is_not_offered_again(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    campaign = await sending_campaign(stores, [["a"]])
    until = utcnow() + timedelta(minutes=5)
    await stores.chunks.claim(campaign.id, 0, "frozen", None, until)
    assert await rescue(stores, registry, bus) == 1
    await registry.beat(pod_beat("taker"))
    await stores.chunks.claim(campaign.id, 0, "taker", "frozen", until, fence=1)
    assert await rescue(stores, registry, bus, later_s=3600) == 0


@pytest.mark.parametrize("status", [Status.CANCELLING, Status.PAUSED])
async def test_chunks_of_campaigns_not_sending_are_left_alone(
        stores: Stores, registry: FakeRegistry, bus: FakeBus, status: Status) -> None:
    """A paused campaign's chunks wait for the resume, whoever held them and however long."""
    campaign = await sending_campaign(stores, [["a"], ["b"]], status=status)
    await stores.chunks.claim(campaign.id, 0, "frozen", None, utcnow() + timedelta(minutes=5))
    bus.delivered = len(bus.chunks)  # nothing ready in the queue
    assert await rescue(stores, registry, bus, later_s=3600) == 0


async def test_a_chunk_nobody_claimed_while_nothing_is_ready_is_offered_after_a_while(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    """Its message went to a consumer that stopped before claiming it."""
    campaign = await sending_campaign(stores, [["a"], ["b"]])
    until = utcnow() + timedelta(minutes=5)
    await stores.chunks.claim(campaign.id, 1, "frozen", None, until)
    assert await rescue(stores, registry, bus) == 1  # the held one at once
    assert await rescue(stores, registry, bus, later_s=1) == 0  # too early for the unclaimed
    bus.delivered = len(bus.chunks)  # nothing ready in the queue
    offered = await rescue(stores, registry, bus, later_s=OFFER_AGAIN_AFTER.total_seconds() + 1)
    assert offered == 2 and [c.seq for c in bus.chunks] == [1, 0, 1]


async def test_a_chunk_nobody_claimed_waits_while_the_queue_holds_work(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    await sending_campaign(stores, [["a"]])
    await bus.send_chunk(bus_chunk := await any_chunk(stores))  # one ready in the queue
    assert bus_chunk.seq == 0
    assert await rescue(stores, registry, bus, later_s=3600) == 0


async def any_chunk(stores: Stores) -> SendChunk:
    campaign = (await stores.campaigns.with_status(Status.IN_PROGRESS))[0]
    chunk = await stores.chunks.get(campaign.id, 0)
    assert chunk is not None
    return SendChunk(campaign_id=campaign.id, seq=0, recipients=list(chunk.recipients))


async def test_a_rollout_s_chunk_whose_wave_is_sent_waits_for_the_next_wave(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    """During a hold every chunk is pending and unclaimed: not lost, only waiting; opening the
    next wave offers it. A chunk whose open wave is not sent yet is still rescued."""
    campaign = await sending_campaign(stores, [["a"], ["b"]], rollout_progress=RolloutProgress(
        wave=0, hold_until=utcnow()))
    await stores.chunks.mark_wave_sent(campaign.id, 0, 0)
    bus.delivered = len(bus.chunks)  # nothing ready in the queue
    offered = await rescue(stores, registry, bus, later_s=OFFER_AGAIN_AFTER.total_seconds() + 1)
    assert offered == 1 and [c.seq for c in bus.chunks] == [1]


async def test_with_many_campaigns_to_look_up_the_same_chunks_are_offered(
        stores: Stores, registry: FakeRegistry, bus: FakeBus) -> None:
    """From ``READ_ALL_FROM`` campaigns on, the rescue reads every running campaign at once
    instead of each alone: a chunk of a campaign that is no longer sending is still left alone,
    a chunk held by a live sender still kept, every other one offered."""
    many = READ_ALL_FROM + 4
    sending = [await sending_campaign(stores, [[f"t{i}"]]) for i in range(many)]
    cancelling = await sending_campaign(stores, [["x"]], status=Status.CANCELLING)
    await registry.beat(pod_beat("alive"))
    until = utcnow() + timedelta(minutes=5)
    await stores.chunks.claim(sending[0].id, 0, "alive", None, until)
    await stores.chunks.claim(sending[1].id, 0, "frozen", None, until)
    await stores.chunks.claim(cancelling.id, 0, "frozen", None, until)
    offered = await rescue(stores, registry, bus, later_s=OFFER_AGAIN_AFTER.total_seconds() + 1)
    assert offered == many - 1
    assert {c.campaign_id for c in bus.chunks} == {c.id for c in sending[1:]}
