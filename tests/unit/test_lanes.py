"""Issue 29: lanes and fair shares, as pure logic and through the sender's window on fakes.

An urgent chunk's requests start before any queued standard or bulk request; a freed permit goes
to the most urgent waiter; a delivery takes only the tokens it can use; a capped campaign's chunks
wait apart from its lane, with a bounded number on offer; the queues' shares add up to the bound.
"""

from __future__ import annotations

import asyncio

import pytest

from herald.domain.lanes import Lane, Route, chunk_route, offer_window
from herald.domain.outcomes import Target
from herald.service_layer.sending.chunk import LiveRate
from herald.service_layer.sending.permits import LanePermits
from herald.service_layer.sending.window import TOKEN_BLOCK, SendWindow, WindowPolicy
from services.dispatcher.backpressure import shares_of
from tests.unit.fakes import HeldFcm, UnlimitedBucket
from tests.unit.window_helpers import TEMPLATE, Records, always, targets, until


# --- pure rules --------------------------------------------------------------------------------
@pytest.mark.parametrize(("lane", "rate", "route"), [
    (Lane.URGENT, None, Route.URGENT), (Lane.URGENT, 100, Route.URGENT),
    (Lane.STANDARD, None, Route.STANDARD), (Lane.STANDARD, 100, Route.PACED),
    (Lane.BULK, None, Route.BULK), (Lane.BULK, 5, Route.PACED)])
def test_a_capped_campaign_waits_apart_unless_it_is_urgent(lane: Lane, rate: int | None,
                                                           route: Route) -> None:
    assert chunk_route(lane, rate) is route


def test_a_capped_campaign_keeps_about_ten_seconds_of_its_rate_on_offer() -> None:
    assert offer_window(None, 500, 12) == 12
    assert offer_window(100, 500, 12) == 2  # 1,000 recipients: 10 s at 100/s
    assert offer_window(1, 500, 12) == 1  # never less than one chunk
    assert offer_window(1_000_000, 500, 12) == 12  # never more than an uncapped one


@pytest.mark.parametrize("bound", [1, 4, 8, 16, 64, 100, 1000])
def test_the_queues_shares_add_up_to_the_bound(bound: int) -> None:
    shares = shares_of(bound)
    assert set(shares) == set(Route) and min(shares.values()) >= 1
    assert sum(shares.values()) == max(bound, len(Route))
    if bound >= 16:
        assert shares[Route.URGENT] >= bound // 4


# --- permits ------------------------------------------------------------------------------------
async def test_a_freed_permit_goes_to_the_most_urgent_waiter_then_first_come() -> None:
    permits = LanePermits(1)
    await permits.acquire(Lane.BULK.rank)
    order: list[str] = []

    async def wait(name: str, lane: Lane) -> None:
        await permits.acquire(lane.rank)
        order.append(name)

    waiters = [asyncio.create_task(wait(name, lane)) for name, lane in
               (("bulk-1", Lane.BULK), ("standard-1", Lane.STANDARD), ("bulk-2", Lane.BULK),
                ("urgent", Lane.URGENT), ("standard-2", Lane.STANDARD))]
    await asyncio.sleep(0)
    for _ in waiters:
        permits.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == ["urgent", "standard-1", "standard-2", "bulk-1", "bulk-2"]


async def test_a_waiter_that_goes_away_passes_its_permit_on() -> None:
    permits = LanePermits(1)
    await permits.acquire()
    leaving = asyncio.create_task(permits.acquire(Lane.URGENT.rank))
    staying = asyncio.create_task(permits.acquire(Lane.BULK.rank))
    await asyncio.sleep(0)
    leaving.cancel()
    permits.release()
    await asyncio.wait_for(staying, 1)
    assert permits.free == 0
    permits.release()
    assert permits.free == 1


# --- the window ---------------------------------------------------------------------------------
async def test_an_urgent_chunk_starts_before_every_queued_bulk_request() -> None:
    """Four bulk deliveries fill a window of 2 connections; an urgent delivery that arrives
    then has all its requests started before any more bulk request."""
    fcm, records = HeldFcm(), Records()
    window = SendWindow(fcm, WindowPolicy(connections=2, unrecorded=6, max_retries=0,
                                          group_wait_s=0.001), UnlimitedBucket())

    def send(prefix: str, count: int, lane: Lane) -> asyncio.Task[None]:
        return asyncio.create_task(window.send(
            TEMPLATE, targets(prefix, count), may_start=always, cancelled=asyncio.Event(),
            record=records.write, lane=lane))

    bulk = [send(f"bulk{n}", 20, Lane.BULK) for n in range(4)]
    await until(lambda: len(fcm.on_wire) == 2)
    urgent = send("urgent", 5, Lane.URGENT)
    while not urgent.done():
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0)
    await urgent
    started_after = fcm.sent[fcm.sent.index("urgent-0"):]
    assert [t for t in started_after if t.startswith("urgent")] == [f"urgent-{n}" for n in range(5)]
    # the urgent requests are the next five started (at most the window's other permits'
    # bulk requests, already queued before it arrived, go in between)
    assert started_after.index("urgent-4") < 5 + 6
    while not all(task.done() for task in bulk):
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0)
    assert sorted(records.written) == sorted(fcm.sent)


class CountingBucket(UnlimitedBucket):
    """Grants what is asked; remembers each request for tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    async def take(self, wanted: int, stop: asyncio.Event | None = None) -> int:
        self.asked.append(wanted)
        return await super().take(wanted, stop)


@pytest.mark.parametrize("count", [1, 5, TOKEN_BLOCK - 1, TOKEN_BLOCK, 3 * TOKEN_BLOCK + 7])
async def test_a_delivery_takes_the_tokens_it_sends_not_a_whole_block(count: int) -> None:
    fcm, records = HeldFcm(), Records()
    project = CountingBucket()
    window = SendWindow(fcm, WindowPolicy(connections=8, unrecorded=500, max_retries=0),
                        project)
    task = asyncio.create_task(window.send(TEMPLATE, targets("a", count), may_start=always,
                                           cancelled=asyncio.Event(), record=records.write))
    while not task.done():
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0)
    await task
    assert project.taken == count == len(fcm.sent)
    assert max(project.asked) <= TOKEN_BLOCK


async def test_a_bulk_request_takes_from_its_lanes_share_and_from_the_project() -> None:
    fcm, records = HeldFcm(), Records()
    bulk_share, project = CountingBucket(), CountingBucket()
    window = SendWindow(fcm, WindowPolicy(connections=8, unrecorded=500, max_retries=0),
                        UnlimitedBucket())
    task = asyncio.create_task(window.send(
        TEMPLATE, targets("b", 10), may_start=always, cancelled=asyncio.Event(),
        record=records.write, buckets=(bulk_share, project), lane=Lane.BULK))
    while not task.done():
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0)
    await task
    assert bulk_share.taken == project.taken == 10


class RateInfo:
    def __init__(self, rate_per_s: int | None) -> None:
        self.rate_per_s = rate_per_s


class PerCampaign:
    def __init__(self) -> None:
        self.bucket = CountingBucket()

    def for_campaign(self, _campaign_id: str, rate_per_s: int | None) -> CountingBucket | None:
        return None if rate_per_s is None else self.bucket


@pytest.mark.parametrize(("rate", "most"), [(1, 1), (100, 10), (10_000, 64)])
async def test_a_capped_campaign_grants_a_tenth_of_a_second_at_a_time(rate: int, most: int) -> None:
    limits = PerCampaign()
    live = LiveRate(limits, "c", RateInfo(rate))  # type: ignore[arg-type]
    assert await live.take(64) == most
    assert limits.bucket.asked == [most]


async def test_an_uncapped_campaign_grants_at_once_without_asking() -> None:
    limits = PerCampaign()
    assert await LiveRate(limits, "c", RateInfo(None)).take(64) == 64  # type: ignore[arg-type]
    assert limits.bucket.asked == []


def test_targets_helper_is_what_the_window_tests_use() -> None:
    assert targets("x", 2) == [Target(0, "x-0"), Target(1, "x-1")]
