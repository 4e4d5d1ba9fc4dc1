"""Seed 001's race cases at the service layer, on the real stores: whatever order the writes land
in, a campaign ends completed or cancelled, never both, and its numbers always add up."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from herald.adapters import devices as devices_adapter
from herald.adapters.redis import RedisPodRegistry
from herald.clock import utcnow
from herald.domain.documents import CampaignCounts, ChunkStatus, Dispatch, Outcome, Progress
from herald.domain.messages import Recipient
from herald.domain.pods import PodBeat
from herald.domain.status import Status, Transition
from herald.names import RedisKeys
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import FollowUpSource, audit, final_counts, unpaged
from herald.service_layer.stopping import CannotCancel
from herald.settings import Settings
from tests.factories import EVERYONE, actor, at, campaign, device, recipients_of
from tests.integration.helpers import Stopping, last_chunk_pending


@pytest.fixture
def cancellation(stores: Stores, redis: Any, settings: Settings) -> Stopping:
    return Stopping(stores, redis, settings)


@pytest.mark.parametrize("delay_cancel_s", [0.0, 0.001, 0.003, 0.006, 0.01])
async def test_cancel_racing_the_last_chunks_completion(
        stores: Stores, cancellation: Stopping, delay_cancel_s: float) -> None:
    campaign_id = await last_chunk_pending(stores)

    async def cancel() -> None:
        await asyncio.sleep(delay_cancel_s)
        with contextlib.suppress(CannotCancel):
            await cancellation.decider.cancel(campaign_id, "race", actor("test"))

    async def finish_last_chunk() -> None:
        await cancellation.chunk_finished(campaign_id, 2, 0, done=True)

    await asyncio.gather(cancel(), finish_last_chunk())
    await cancellation.finish(campaign_id)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored.status in (Status.COMPLETED, Status.CANCELLED)
    assert stored.counts == CampaignCounts(targeted=4, sent=4, failed=0)
    assert (stored.cancel is not None) == (stored.status is Status.CANCELLED)


async def test_many_cancels_at_once_write_one_cancel_record(
        stores: Stores, cancellation: Stopping) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)
    campaign_id = record.id
    outcomes = await asyncio.gather(*(
        cancellation.decider.cancel(campaign_id, f"reason {i}", actor(f"user {i}"))
        for i in range(20)))
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    winners = {(o.campaign.cancel.reason, o.campaign.cancel.requested_at)
               for o in outcomes if o.campaign.cancel is not None}
    assert len(winners) == 1, "every caller sees the one cancel that won"
    assert stored.cancel is not None
    assert stored.cancel.reason in {f"reason {i}" for i in range(20)}


async def test_a_cancelled_campaign_counts_exactly_what_was_recorded(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await last_chunk_pending(stores)
    await cancellation.decider.cancel(campaign_id, None, None)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    counts = (await final_counts(stores, stored)).counts
    assert stored.status is Status.CANCELLED
    assert (counts.targeted, counts.sent) == (stored.counts.targeted, stored.counts.sent)


async def test_cancel_during_paging_leaves_the_rest_beyond_the_cursor_listed_and_counted(
        stores: Stores, cancellation: Stopping, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: nothing is written for the unpaged rest at the cancel. The final counts take
    it from the database at that instant (a count on the id range beyond the checkpoint); the
    audit lists it from there, and a retarget reaches exactly the unsent, through several pages
    of devices; the rest is counted in several slices. Devices registered later never join;
    one retired later stays counted, and is neither listed nor retargeted."""
    monkeypatch.setattr(devices_adapter, "STREAM_PAGE", 7)
    monkeypatch.setattr(devices_adapter, "COUNT_SLICE", 4)
    await stores.devices.upsert([device(i) for i in range(50)], utcnow())
    everyone = [d async for d in stores.devices.stream(EVERYONE, None, None)]
    record = campaign(status=Status.IN_PROGRESS, chunk_size=20, counts=CampaignCounts(targeted=20),
                      dispatch=Dispatch(owner="d", until=everyone[-1][0], next_seq=1))
    await stores.campaigns.insert(record)
    campaign_id = record.id
    await stores.chunks.create(campaign_id, 0, [Recipient(token=r.token) for _, r in everyone[:20]],
                               everyone[19][0], utcnow())
    await stores.deliveries.record(campaign_id, 0, "s", at([(p, None) for p in range(5)]), utcnow())
    await cancellation.decider.cancel(campaign_id, None, None)
    cancelled = await cancellation.finish(campaign_id)
    assert cancelled is not None
    assert cancelled.counts == CampaignCounts(targeted=50, sent=5, failed=0)
    assert [c.seq async for c in stores.chunks.in_order(campaign_id)] == [0]  # nothing frozen
    assert await unpaged(stores, cancelled) == 30
    unsent = [line.token async for line in audit(stores, cancelled, Outcome.UNSENT)]
    assert unsent == [r.token for _, r in everyone[5:]]
    retarget = FollowUpSource(stores, cancelled)
    assert [r.token async for _, r in retarget.stream(after=None)] == unsent
    assert await retarget.count(after=None) == len(unsent)

    await stores.devices.upsert([device(100 + i) for i in range(10)], utcnow())
    await stores.devices.mark_invalid([everyone[40][1].token], "UNREGISTERED", utcnow())
    later = await stores.campaigns.get(campaign_id)
    assert later is not None
    still = [line.token async for line in audit(stores, later, Outcome.UNSENT)]
    assert still == [token for token in unsent if token != everyone[40][1].token]
    assert (await final_counts(stores, later)).counts == cancelled.counts


async def test_a_live_pod_busy_with_the_campaign_delays_the_cancel_even_if_not_expected(
        stores: Stores, cancellation: Stopping, redis: Any, settings: Settings) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)
    campaign_id = record.id
    await cancellation.decider.cancel(campaign_id, None, None)  # nobody alive yet
    newcomer = RedisPodRegistry(redis, RedisKeys(settings.mongodb_database), 5)
    await newcomer.beat(PodBeat(id="late-sender", service="sender", host="h", pid=1, version="t",
                                started_at=0.0, campaigns=[campaign_id]))
    assert await cancellation.finish(campaign_id) is None
    await newcomer.beat(PodBeat(id="late-sender", service="sender", host="h", pid=1, version="t",
                                started_at=0.0, campaigns=[]))
    assert await cancellation.finish(campaign_id) is not None


async def test_a_campaign_whose_finishing_was_interrupted_is_finished_by_the_sweep(
        stores: Stores, cancellation: Stopping) -> None:
    counted = await last_chunk_pending(stores)  # its last chunk closed and counted, then...
    await chunk_finished_without_finalizing(stores, counted)
    stuck = await stores.campaigns.get(counted)
    assert stuck is not None
    assert stuck.status is Status.IN_PROGRESS
    reconciled = await cancellation.reconcile(stuck)
    assert reconciled is not None and reconciled.status is Status.COMPLETED

    finalizing = await last_chunk_pending(stores)
    await stores.campaigns.transition(finalizing, Transition.FINALIZE, utcnow())
    left = await stores.campaigns.get(finalizing)
    assert left is not None
    finished = await cancellation.settler.settled(left)
    assert finished is not None
    assert finished.status is Status.COMPLETED
    assert finished.counts == CampaignCounts(targeted=4, sent=4, failed=0)


async def chunk_finished_without_finalizing(stores: Stores, campaign_id: str) -> None:
    """What a sender that died right after counting its chunk leaves behind."""
    await stores.campaigns.count_finished_chunk(campaign_id, 2, 0, done=True)


async def closed_chunks(stores: Stores, published: int, closed: int, counted: int) -> str:
    """A paged campaign of two-recipient chunks: ``closed`` of them sent and closed, only
    ``counted`` of those counted in its progress yet (a sender between the two writes)."""
    record = campaign(status=Status.IN_PROGRESS,
                      dispatch=Dispatch(owner="d", done=True, next_seq=published),
                      progress=Progress(chunks_published=published, chunks_done=counted),
                      counts=CampaignCounts(targeted=2 * published, sent=2 * counted))
    await stores.campaigns.insert(record)
    campaign_id, now = record.id, utcnow()
    for seq in range(published):
        await stores.chunks.create(campaign_id, seq, recipients_of(f"t{seq}{i}" for i in range(2)),
                                   None, now)
        if seq < closed:
            await stores.deliveries.record(campaign_id, seq, "s", at([(0, None), (1, None)]), now)
            assert await stores.chunks.finish(campaign_id, seq, ChunkStatus.DONE, 2, 0, now,
                                              owner=None)
    return campaign_id


async def test_the_sweep_never_counts_a_chunk_its_sender_is_about_to_count(
        stores: Stores, cancellation: Stopping) -> None:
    """Seen under load: the sweep counted a chunk closed a moment before, its sender then
    counted it too, and the campaign completed while its last chunk was still queued."""
    campaign_id = await closed_chunks(stores, published=3, closed=2, counted=1)
    paged = await stores.campaigns.get(campaign_id)
    assert paged is not None
    assert await cancellation.reconcile(paged) is None
    assert await cancellation.chunk_finished(campaign_id, 2, 0, done=True) is None  # chunk 1, late
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert (stored.status, stored.progress.chunks_done) == (Status.IN_PROGRESS, 2)

    await stores.deliveries.record(campaign_id, 2, "s", at([(0, None), (1, None)]), utcnow())
    assert await stores.chunks.finish(campaign_id, 2, ChunkStatus.DONE, 2, 0, utcnow(),
                                      owner=None)
    finished = await cancellation.chunk_finished(campaign_id, 2, 0, done=True)
    assert finished is not None
    assert (finished.status, finished.counts) == (
        Status.COMPLETED, CampaignCounts(targeted=6, sent=6, failed=0))


async def test_a_chunk_counted_after_the_sweep_finished_its_campaign_changes_no_number(
        stores: Stores, cancellation: Stopping) -> None:
    campaign_id = await closed_chunks(stores, published=2, closed=2, counted=1)
    paged = await stores.campaigns.get(campaign_id)
    assert paged is not None
    finished = await cancellation.reconcile(paged)
    assert finished is not None
    assert (finished.status, finished.counts) == (
        Status.COMPLETED, CampaignCounts(targeted=4, sent=4, failed=0))
    assert await cancellation.chunk_finished(campaign_id, 2, 0, done=True) is None  # its sender, late
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored.counts == finished.counts
