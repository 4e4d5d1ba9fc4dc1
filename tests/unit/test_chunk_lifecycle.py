"""How a chunk's story ends: tally what was recorded, record each batch, close it once."""

from __future__ import annotations

import pytest

from herald.clock import utcnow
from herald.domain.documents import Campaign, CampaignCounts, ChunkStatus
from herald.domain.outcomes import dead_tokens
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from herald.service_layer.sending.lifecycle import ChunkLifecycle, Tally
from herald.service_layer.stopping import Settler
from tests.factories import at, device, sending_campaign
from tests.unit.fakes import FakeClock, FakeRegistry


@pytest.fixture
def lifecycle(stores: Stores, clock: FakeClock) -> ChunkLifecycle:
    return ChunkLifecycle(stores, "s1", clock,
                          settled=Settler(stores, FakeRegistry(), "s1").settled)


async def held(stores: Stores, tokens: list[list[str]]) -> Campaign:
    """A sending campaign whose chunks sender ``s1`` holds."""
    campaign = await sending_campaign(stores, tokens)
    for seq in range(len(tokens)):
        await stores.chunks.claim(campaign.id, seq, "s1", None, utcnow())
    return campaign


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


def test_a_tally_starts_from_what_was_recorded() -> None:
    tally = Tally.of({0: None, 1: "UNREGISTERED", 4: None})
    assert (tally.sent, tally.failed, tally.recorded_now) == (2, 1, 0)
    assert tally.status is ChunkStatus.DONE


def test_a_tally_adds_what_this_delivery_recorded() -> None:
    tally = Tally.of({0: None})
    tally.add(at([(1, None), (2, "QUOTA_EXCEEDED"), (3, None)]))
    assert (tally.sent, tally.failed, tally.recorded_now) == (3, 1, 3)


def test_a_tally_stopped_by_a_cancel_closes_the_chunk_cancelled() -> None:
    assert Tally(stopped=True).status is ChunkStatus.CANCELLED


def test_only_errors_that_kill_a_token_retire_it() -> None:
    outcomes = at([(0, None), (1, "UNREGISTERED"), (2, "INVALID_ARGUMENT"), (3, "UNAVAILABLE"),
                   (4, "QUOTA_EXCEEDED"), (5, "INVALID_PAYLOAD")], tokens="abcdef")
    assert dead_tokens(outcomes) == [("b", "UNREGISTERED"), ("c", "INVALID_ARGUMENT")]


async def test_recording_a_batch_writes_its_outcomes_and_retires_dead_tokens(
        stores: Stores, lifecycle: ChunkLifecycle, clock: FakeClock) -> None:
    tokens = ["tok-00000", "tok-00001", "tok-00002", "tok-00003"]
    await stores.devices.upsert([device(i) for i in range(4)], utcnow())
    campaign = await held(stores, [tokens])
    outcomes = [(0, None), (1, "UNREGISTERED"), (2, "INVALID_ARGUMENT"), (3, "UNAVAILABLE")]
    tally = Tally()
    await lifecycle.record(campaign.id, 0, at(outcomes), tally,
                           dead_tokens(at(outcomes, tokens)))
    deliveries = [d async for d in stores.deliveries.in_order(campaign.id)]
    devices = [await stores.devices.find_by_token(token) for token in tokens]
    assert await stores.deliveries.recorded(campaign.id, 0) == dict(outcomes)
    assert [(d.pod, d.at) for d in deliveries] == [("s1", clock())]
    assert (tally.sent, tally.failed, tally.recorded_now) == (1, 3, 4)
    assert [(d.invalid, d.invalid_reason) for d in devices if d is not None] == [
        (False, None), (True, "UNREGISTERED"), (True, "INVALID_ARGUMENT"), (False, None)]


async def test_recording_no_outcome_writes_nothing(stores: Stores,
                                                   lifecycle: ChunkLifecycle) -> None:
    campaign = await held(stores, [["a"]])
    tally = Tally()
    await lifecycle.record(campaign.id, 0, at([]), tally)
    assert [d async for d in stores.deliveries.in_order(campaign.id)] == []
    assert tally == Tally()


async def test_what_earlier_deliveries_recorded_is_read_back(stores: Stores,
                                                             lifecycle: ChunkLifecycle) -> None:
    campaign = await held(stores, [["a", "b", "c"]])
    await stores.deliveries.record(campaign.id, 0, "dead", at([(0, None), (2, "UNAVAILABLE")]),
                                   utcnow())
    assert await lifecycle.recorded(campaign.id, 0) == {0: None, 2: "UNAVAILABLE"}


async def test_a_chunk_is_closed_and_counted_once(stores: Stores, lifecycle: ChunkLifecycle,
                                                  clock: FakeClock) -> None:
    campaign = await held(stores, [["a", "b"], ["c"]])
    tally = Tally(sent=1, failed=1)
    assert await lifecycle.close(campaign.id, 0, ChunkStatus.DONE, tally)
    assert not await lifecycle.close(campaign.id, 0, ChunkStatus.DONE, tally)
    state = await stores.chunks.state(campaign.id, 0)
    counted = await stored(stores, campaign.id)
    assert state is not None
    assert (state.status, state.sent, state.failed, state.finished_at, state.owner) == (
        ChunkStatus.DONE, 1, 1, clock(), None)
    assert counted.counts == CampaignCounts(targeted=3, sent=1, failed=1)
    assert counted.progress.chunks_done == 1 and counted.status is Status.IN_PROGRESS


async def test_a_chunk_another_pod_holds_is_not_closed_here(stores: Stores,
                                                            lifecycle: ChunkLifecycle) -> None:
    campaign = await sending_campaign(stores, [["a"]])
    await stores.chunks.claim(campaign.id, 0, "s2", None, utcnow())
    assert not await lifecycle.close(campaign.id, 0, ChunkStatus.DONE, Tally(sent=1))
    assert (await stored(stores, campaign.id)).counts.sent == 0


async def test_closing_the_last_chunk_completes_the_campaign(
        stores: Stores, lifecycle: ChunkLifecycle) -> None:
    campaign = await held(stores, [["a"]])
    tally = Tally()
    await lifecycle.record(campaign.id, 0, at([(0, None)]), tally)
    await lifecycle.close(campaign.id, 0, tally.status, tally)
    done = await stored(stores, campaign.id)
    assert done.status is Status.COMPLETED and done.counts == CampaignCounts(targeted=1, sent=1)


async def test_a_chunk_closed_by_a_cancel_counts_its_outcomes_but_not_as_done(
        stores: Stores, lifecycle: ChunkLifecycle) -> None:
    campaign = await held(stores, [["a", "b"]])
    tally = Tally(stopped=True)
    await lifecycle.record(campaign.id, 0, at([(0, None)]), tally)
    await lifecycle.close(campaign.id, 0, tally.status, tally)
    after = await stored(stores, campaign.id)
    state = await stores.chunks.state(campaign.id, 0)
    assert state is not None and state.status is ChunkStatus.CANCELLED
    assert (after.counts.sent, after.progress.chunks_done) == (1, 0)
    assert after.status is Status.IN_PROGRESS


async def test_a_dead_lettered_chunk_counts_as_done(stores: Stores,
                                                    lifecycle: ChunkLifecycle) -> None:
    campaign = await held(stores, [["a", "b"]])
    tally = Tally()
    await lifecycle.record(campaign.id, 0, at([(0, "HERALD_DEAD_LETTERED"),
                                            (1, "HERALD_DEAD_LETTERED")]), tally)
    await lifecycle.close(campaign.id, 0, ChunkStatus.DEAD, tally)
    failed = await stored(stores, campaign.id)
    assert failed.status is Status.FAILED and failed.counts == CampaignCounts(targeted=2, failed=2)
