"""Issue 30 point 4 on the real stores (nx-27017, Redis): the races of stopping and finishing,
20 times each with the order shaken by small random delays. Whatever order the writes land in:
``sent + failed + unsent = targeted``, the audit lists exactly the counts, and nobody is counted
before a pod that may still send it has stopped.

A sender pod is played by hand: its heartbeat says it works on the campaign, it sends (records
and closes) a chunk when its view says ``send``, and acknowledges each stopping decision once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from faststream.rabbit import RabbitBroker

from herald.adapters.rabbit import RabbitBus
from herald.adapters.redis import RedisCancelFlags, RedisPodRegistry
from herald.clock import utcnow
from herald.domain.documents import Campaign, CampaignCounts, ChunkStatus, Dispatch, Outcome
from herald.domain.documents import Progress as ChunkProgress
from herald.domain.messages import SendChunk
from herald.domain.status import Status, Verdict
from herald.names import RedisKeys
from herald.service_layer.offers import ResumeOffers
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import audit
from herald.service_layer.stopping import CannotCancel, CannotPause, CannotResume, PodView
from herald.settings import Settings
from tests.factories import actor, at, campaign, pod_beat, recipients_of
from tests.integration.helpers import Stopping

RUNS = 20
CHUNKS, SIZE = 3, 2


async def jitter() -> None:
    await asyncio.sleep(random.uniform(0, 0.004))


async def paged(stores: Stores) -> str:
    """A campaign of ``CHUNKS`` chunks of ``SIZE``, paged, none sent yet."""
    record = campaign(status=Status.IN_PROGRESS,
                      dispatch=Dispatch(owner="d", done=True, next_seq=CHUNKS),
                      progress=ChunkProgress(chunks_published=CHUNKS),
                      counts=CampaignCounts(targeted=CHUNKS * SIZE))
    await stores.campaigns.insert(record)
    for seq in range(CHUNKS):
        await stores.chunks.create(record.id, seq,
                                   recipients_of(f"{record.id}-{seq}-{i}" for i in range(SIZE)),
                                   None, utcnow())
    return record.id


class Sender:
    """Pod ``s1`` as the race sees it: sends a chunk only while its view says so."""

    def __init__(self, stores: Stores, stopping: Stopping, flags: RedisCancelFlags) -> None:
        self.stores = stores
        self.stopping = stopping
        self.registry = stopping.registry
        self.view = PodView(stores.campaigns, flags)

    async def works_on(self, campaign_id: str) -> None:
        await self.registry.beat(pod_beat("s1", campaigns=[campaign_id]))

    async def send(self, campaign_id: str, seq: int) -> bool:
        """Record and close chunk ``seq`` if the campaign may send (asked of the store, as a
        sender does when a chunk is offered); whether it did."""
        if await self.view.read(campaign_id) is not Verdict.SEND:
            return False
        state = await self.stores.chunks.state(campaign_id, seq)
        if state is None or state.status is not ChunkStatus.PENDING:
            return False
        now = utcnow()
        await self.stores.deliveries.record(campaign_id, seq, "s1",
                                            at([(p, None) for p in range(SIZE)]), now)
        await self.stores.chunks.finish(campaign_id, seq, ChunkStatus.DONE, SIZE, 0, now,
                                        owner=None)
        await self.stopping.chunk_finished(campaign_id, SIZE, 0, done=True)
        return True

    async def stop_and_acknowledge(self, campaign_id: str) -> None:
        """Idle: acknowledge the latest stopping decision, if there is one, and report."""
        current = await self.stores.campaigns.get(campaign_id)
        await self.registry.beat(pod_beat("s1"))
        if current is not None and current.decision is not None and \
                current.decision.kind.stops_pods:
            await self.stores.campaigns.add_ack(campaign_id, current.decision, "s1")
        await self.stopping.finish(campaign_id)


async def exact(stores: Stores, campaign_id: str) -> Campaign:
    """The campaign's counts add up and equal its audit, line for line."""
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    counts = found.pause.counts if found.status is Status.PAUSED and found.pause else found.counts
    assert counts is not None
    assert counts.sent + counts.failed + counts.unsent == counts.targeted
    listed = {outcome: [line async for line in audit(stores, found, outcome)]
              for outcome in Outcome}
    assert (len(listed[Outcome.SENT]), len(listed[Outcome.FAILED]),
            len(listed[Outcome.UNSENT])) == (counts.sent, counts.failed, counts.unsent)
    return found


@pytest.fixture
def stopping(stores: Stores, redis: Any, settings: Settings) -> Stopping:
    return Stopping(stores, redis, settings)


@pytest.fixture
def sender(stores: Stores, stopping: Stopping, redis: Any, settings: Settings) -> Sender:
    return Sender(stores, stopping,
                  RedisCancelFlags(redis, RedisKeys(settings.mongodb_database), 60))


class Recorded(RabbitBus):
    """The real bus, remembering each chunk it published (once the broker confirmed it)."""

    def __init__(self, broker: RabbitBroker) -> None:
        super().__init__(broker)
        self.chunks: list[SendChunk] = []

    async def send_chunk(self, message: SendChunk) -> None:
        await super().send_chunk(message)
        self.chunks.append(message)


async def settled_pause(stores: Stores, stopping: Stopping, sender: Sender) -> str:
    campaign_id = await paged(stores)
    await sender.works_on(campaign_id)
    assert await sender.send(campaign_id, 0)
    await stopping.decider.pause(campaign_id, "hold", actor("ops"))
    await sender.stop_and_acknowledge(campaign_id)
    paused = await stores.campaigns.get(campaign_id)
    assert paused is not None and paused.pause is not None and paused.pause.settled_at
    return campaign_id


@pytest.mark.parametrize("run", range(RUNS))
async def test_cancel_racing_the_resume_of_a_settled_pause(
        stores: Stores, stopping: Stopping, sender: Sender, run: int) -> None:
    """If the resume lands first, the sender sends again: the cancel must wait for it, and its
    counts include what it sent (the audit's ``sent`` never exceeds ``counts.sent``)."""
    campaign_id = await settled_pause(stores, stopping, sender)

    async def resume() -> None:
        await jitter()
        with contextlib.suppress(CannotResume):
            await stopping.decider.resume(campaign_id, actor("ops"))
            await sender.works_on(campaign_id)
            await sender.send(campaign_id, 1)

    async def cancel() -> None:
        await jitter()
        await stopping.decider.cancel(campaign_id, "race", actor("lead"))

    await asyncio.gather(resume(), cancel())
    await sender.stop_and_acknowledge(campaign_id)
    done = await exact(stores, campaign_id)
    assert done.status is Status.CANCELLED


@pytest.mark.parametrize("run", range(RUNS))
async def test_pause_racing_the_last_chunk(
        stores: Stores, stopping: Stopping, sender: Sender, run: int) -> None:
    campaign_id = await paged(stores)
    await sender.works_on(campaign_id)
    for seq in range(CHUNKS - 1):
        assert await sender.send(campaign_id, seq)

    async def pause() -> None:
        await jitter()
        with contextlib.suppress(CannotPause):
            await stopping.decider.pause(campaign_id, "race", actor("ops"))

    async def last_chunk() -> None:
        await jitter()
        await sender.send(campaign_id, CHUNKS - 1)

    await asyncio.gather(pause(), last_chunk())
    await sender.stop_and_acknowledge(campaign_id)
    found = await exact(stores, campaign_id)
    if found.status is Status.PAUSED:
        resumed = await stopping.decider.resume(campaign_id, actor("ops"))
        await sender.works_on(campaign_id)
        await sender.send(campaign_id, CHUNKS - 1)
        assert resumed.status in (Status.IN_PROGRESS, Status.COMPLETED)
    done = await exact(stores, campaign_id)
    assert done.status is Status.COMPLETED
    assert done.counts == CampaignCounts(targeted=CHUNKS * SIZE, sent=CHUNKS * SIZE)


@pytest.mark.parametrize("run", range(RUNS))
async def test_resume_racing_the_sweep_offers_the_kept_chunks_once(
        stores: Stores, stopping: Stopping, sender: Sender, broker: RabbitBroker,
        run: int) -> None:
    """Two dispatchers' sweeps and the resume at once: the kept chunks are offered once."""
    campaign_id = await settled_pause(stores, stopping, sender)
    bus = Recorded(broker)
    offers = [ResumeOffers(stores, bus), ResumeOffers(stores, bus)]

    async def resume() -> None:
        await jitter()
        await stopping.decider.resume(campaign_id, actor("ops"))

    async def sweep(offer: ResumeOffers) -> None:
        for _ in range(3):
            await jitter()
            await offer.recover(utcnow())
            await stopping.settler.recover(utcnow())

    await asyncio.gather(resume(), *(sweep(offer) for offer in offers))
    await offers[0].recover(utcnow())
    assert sorted(m.seq for m in bus.chunks) == list(range(1, CHUNKS)), "each kept chunk once"
    for message in bus.chunks:
        assert await sender.send(campaign_id, message.seq)
    done = await exact(stores, campaign_id)
    assert done.status is Status.COMPLETED


@pytest.mark.parametrize("run", range(RUNS))
async def test_cancel_of_a_paused_campaign_while_a_pod_restarts(
        stores: Stores, stopping: Stopping, sender: Sender, redis: Any, settings: Settings,
        run: int) -> None:
    """The pause is not settled yet (s1 has not acknowledged) when s1 dies and a new pod takes
    its place and picks the campaign up: the cancel waits for the newcomer, not for s1."""
    campaign_id = await paged(stores)
    await sender.works_on(campaign_id)
    assert await sender.send(campaign_id, 0)
    await stopping.decider.pause(campaign_id, "hold", actor("ops"))
    newcomer = RedisPodRegistry(redis, RedisKeys(settings.mongodb_database), 5)

    async def restart() -> None:
        await jitter()
        await sender.registry.remove("s1")
        await newcomer.beat(pod_beat("s2", campaigns=[campaign_id]))

    async def cancel() -> None:
        await jitter()
        with contextlib.suppress(CannotCancel):
            await stopping.decider.cancel(campaign_id, "race", actor("lead"))

    await asyncio.gather(restart(), cancel())
    assert (await stopping.finish(campaign_id)) is None  # s2 is busy with it
    await newcomer.beat(pod_beat("s2"))  # s2 stopped; it never acknowledged (newcomer)
    finished = await stopping.finish(campaign_id)
    if finished is None:  # the idle beat must come a second after the request
        await asyncio.sleep(1.1)
        await newcomer.beat(pod_beat("s2"))
        finished = await stopping.finish(campaign_id)
    assert finished is not None and finished.status is Status.CANCELLED
    await exact(stores, campaign_id)
