"""The settler (``stopping/settle.py``) writes every end of a campaign once: here, completion,
when its last chunk is counted and paging is over, however the reports arrive."""

from __future__ import annotations

import asyncio

import pytest

from herald.clock import utcnow
from herald.domain.documents import Campaign, CampaignCounts, ChunkStatus, Dispatch, Progress
from herald.domain.status import Status
from herald.observability import CAMPAIGNS_FINISHED
from herald.service_layer.ports import Stores
from herald.service_layer.stopping import Settler
from tests.factories import at, insert, paged, sending_campaign
from tests.unit.fakes import FakeRegistry


def settler(stores: Stores) -> Settler:
    return Settler(stores, FakeRegistry(), "s1")


async def chunk_finished(stores: Stores, campaign_id: str, sent: int, failed: int, *,
                         done: bool) -> Campaign | None:
    """What a sender's close reports: the chunk counted, then the campaign settled."""
    counted = await stores.campaigns.count_finished_chunk(campaign_id, sent, failed, done=done)
    if not done or counted is None:
        return None
    return await settler(stores).settled(counted)


async def finalize(stores: Stores, campaign_id: str) -> Campaign | None:
    """A report to the settler by someone who saw every chunk closed (counting them)."""
    return await settler(stores).settled(await stored(stores, campaign_id), count_closed=True)


async def complete(stores: Stores, campaign: Campaign) -> Campaign | None:
    return await settler(stores).settled(campaign)


async def reconcile(stores: Stores, campaign: Campaign) -> Campaign | None:
    """The sweep's report of a campaign paged and still open."""
    return await settler(stores).settled(campaign, count_closed=True)


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def close(stores: Stores, campaign_id: str, seq: int,
                status: ChunkStatus = ChunkStatus.DONE) -> None:
    """A sender closed chunk ``seq`` (and did not, or not yet, count it)."""
    now = utcnow()
    await stores.chunks.claim(campaign_id, seq, "s1", None, now)
    await stores.chunks.finish(campaign_id, seq, status, 0, 0, now, "s1")


def finished_total(status: Status) -> float:
    value: float = CAMPAIGNS_FINISHED.labels(status.value)._value.get()
    return value


async def test_the_last_chunk_counted_completes_the_campaign_with_counts_from_the_records(
        stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a", "b"], ["c", "d"]])
    await stores.deliveries.record(campaign.id, 0, "s1", at([(0, None), (1, "UNREGISTERED")]),
                                   utcnow())
    await stores.deliveries.record(campaign.id, 1, "s1", at([(0, None), (1, None)]), utcnow())
    first = await chunk_finished(stores, campaign.id, 1, 1, done=True)
    last = await chunk_finished(stores, campaign.id, 2, 0, done=True)
    assert first is None
    assert last is not None and last.status is Status.COMPLETED and last.error is None
    assert last.counts == CampaignCounts(targeted=4, sent=3, failed=1)
    assert last.finished_at is not None


async def test_chunks_of_a_campaign_still_paging_never_complete_it(stores: Stores) -> None:
    campaign_id = await insert(stores, **paged(1, 2, done=False))
    assert await chunk_finished(stores, campaign_id, 2, 0, done=True) is None
    counted = await stored(stores, campaign_id)
    assert counted.status is Status.IN_PROGRESS and counted.progress.chunks_done == 1


async def test_a_chunk_cut_short_by_a_cancel_counts_its_outcomes_but_finishes_nothing(
        stores: Stores) -> None:
    campaign_id = await insert(stores, **paged(1, 5))
    assert await chunk_finished(stores, campaign_id, 2, 1, done=False) is None
    counted = await stored(stores, campaign_id)
    assert (counted.counts.sent, counted.counts.failed, counted.progress.chunks_done) == (2, 1, 0)
    assert counted.status is Status.IN_PROGRESS


async def test_a_cancelling_campaign_is_never_completed_by_its_last_chunk(
        stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a"]], status=Status.CANCELLING)
    assert await chunk_finished(stores, campaign.id, 1, 0, done=True) is None
    assert (await stored(stores, campaign.id)).status is Status.CANCELLING


async def test_a_campaign_is_finalized_exactly_once_however_many_try(stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a"]])
    await stores.deliveries.record(campaign.id, 0, "s1", at([(0, None)]), utcnow())
    await close(stores, campaign.id, 0)
    completed_before = finished_total(Status.COMPLETED)
    results = await asyncio.gather(*(finalize(stores, campaign.id) for _ in range(4)))
    assert sum(r is not None for r in results) == 1
    assert finished_total(Status.COMPLETED) == completed_before + 1


@pytest.mark.parametrize("dispatcher_first", [True, False])
async def test_the_last_chunk_and_the_end_of_paging_complete_the_campaign_once_in_any_order(
        stores: Stores, dispatcher_first: bool) -> None:
    """Whichever of the two writes comes last sees both facts and finalizes."""
    campaign_id = await insert(stores, **paged(1, 1, owner="d1", done=False))
    await stores.deliveries.record(campaign_id, 0, "s1", at([(0, None)]), utcnow())

    async def sender() -> Campaign | None:
        return await chunk_finished(stores, campaign_id, 1, 0, done=True)

    async def dispatcher() -> Campaign | None:
        finished = await stores.campaigns.finish_dispatch(campaign_id, "d1", utcnow())
        return None if finished is None else await settler(stores).settled(finished)

    order = (dispatcher(), sender()) if dispatcher_first else (sender(), dispatcher())
    results = await asyncio.gather(*order)
    assert sum(r is not None for r in results) == 1
    assert (await stored(stores, campaign_id)).status is Status.COMPLETED


async def test_recipients_failing_only_for_dead_tokens_still_complete(stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a", "b", "c"]])
    await stores.deliveries.record(campaign.id, 0, "s1",
                                   at([(0, "UNREGISTERED"), (1, "INVALID_ARGUMENT"), (2, None)]),
                                   utcnow())
    await close(stores, campaign.id, 0)
    done = await finalize(stores, campaign.id)
    assert done is not None and done.status is Status.COMPLETED and done.error is None
    assert done.counts == CampaignCounts(targeted=3, sent=1, failed=2)


@pytest.mark.parametrize("error", ["QUOTA_EXCEEDED", "UNAVAILABLE", "HERALD_DEAD_LETTERED"])
async def test_recipients_failing_for_other_reasons_fail_the_campaign_retryably(
        stores: Stores, error: str) -> None:
    campaign = await sending_campaign(stores, [["a", "b", "c"]])
    await stores.deliveries.record(campaign.id, 0, "s1",
                                   at([(0, error), (1, "UNREGISTERED"), (2, None)]), utcnow())
    await close(stores, campaign.id, 0)
    failed = await finalize(stores, campaign.id)
    assert failed is not None and failed.status is Status.FAILED
    assert failed.counts == CampaignCounts(targeted=3, sent=1, failed=2)
    assert failed.error is not None
    assert failed.error.startswith("1 recipients failed for reasons other than their token")


async def test_a_campaign_left_finalizing_is_completed_once_by_the_sweep(
        stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a"]], status=Status.FINALIZING)
    await stores.deliveries.record(campaign.id, 0, "s1", at([(0, None)]), utcnow())
    done = await complete(stores, await stored(stores, campaign.id))
    again = await complete(stores, await stored(stores, campaign.id))
    assert done is not None and done.status is Status.COMPLETED
    assert done.counts == CampaignCounts(targeted=1, sent=1, failed=0)
    assert again is None


# --- reconcile: finishing what a dead pod (or an outage) left ------------------------------------
async def test_reconcile_finishes_a_campaign_whose_last_chunk_was_closed_but_never_counted(
        stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a"], ["b"]])
    for seq in (0, 1):
        await stores.deliveries.record(campaign.id, seq, "s1", at([(0, None)]), utcnow())
    await close(stores, campaign.id, 0)
    await close(stores, campaign.id, 1, ChunkStatus.DEAD)
    await chunk_finished(stores, campaign.id, 1, 0, done=True)  # the second was never counted
    finished = await reconcile(stores, await stored(stores, campaign.id))
    assert finished is not None and finished.status is Status.COMPLETED
    assert finished.counts == CampaignCounts(targeted=2, sent=2, failed=0)


async def test_reconcile_finishes_a_campaign_counted_but_never_finalized(stores: Stores) -> None:
    campaign_id = await insert(stores, **{**paged(1, 0), "progress": Progress(
        chunks_published=1, chunks_done=1)})
    finished = await reconcile(stores, await stored(stores, campaign_id))
    assert finished is not None and finished.status is Status.COMPLETED


async def test_reconcile_leaves_a_campaign_with_a_chunk_still_open(stores: Stores) -> None:
    campaign = await sending_campaign(stores, [["a"], ["b"]])
    await close(stores, campaign.id, 0)
    await close(stores, campaign.id, 1, ChunkStatus.CANCELLED)  # closed, but not for good
    assert await reconcile(stores, await stored(stores, campaign.id)) is None
    assert (await stored(stores, campaign.id)).status is Status.IN_PROGRESS


async def test_reconcile_leaves_a_campaign_still_paging(stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS,
                               dispatch=Dispatch(owner="d1", next_seq=0))
    assert await reconcile(stores, await stored(stores, campaign_id)) is None
