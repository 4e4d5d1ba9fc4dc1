"""Holding a chunk while sending it: one sender at a time, a dead or overdue holder's chunk
taken over, and one delivery of a chunk at a time in a process."""

from __future__ import annotations

import asyncio

import pytest

from herald.domain.documents import ChunkState, ChunkStatus, new_id
from herald.service_layer.ports import Stores
from herald.service_layer.sending.claims import ChunkClaims, NotTaken
from tests.factories import pod_beat, recipients
from tests.unit.fakes import FakeChunks, FakeClock, FakeRegistry

HOLD_S = 60.0


def claims_of(stores: Stores, registry: FakeRegistry, clock: FakeClock,
              pod_id: str = "s1") -> ChunkClaims:
    return ChunkClaims(stores.chunks, registry, pod_id, HOLD_S, clock)


async def chunk(stores: Stores, clock: FakeClock) -> str:
    campaign_id = new_id()
    await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, clock())
    return campaign_id


async def state(stores: Stores, campaign_id: str) -> ChunkState:
    found = await stores.chunks.state(campaign_id, 0)
    assert found is not None
    return found


async def test_a_free_chunk_is_held_for_this_pod_with_one_more_attempt(
        stores: Stores, registry: FakeRegistry, clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    before = await claims_of(stores, registry, clock).take(campaign_id, 0)
    assert isinstance(before, ChunkState) and (before.owner, before.attempts) == (None, 0)
    held = await state(stores, campaign_id)
    assert (held.owner, held.attempts) == ("s1", 1)
    assert held.owner_until == clock.advance(HOLD_S)


async def test_a_missing_or_closed_chunk_is_not_taken(stores: Stores, registry: FakeRegistry,
                                                      clock: FakeClock) -> None:
    claims = claims_of(stores, registry, clock)
    assert await claims.take(new_id(), 0) is NotTaken.UNKNOWN
    campaign_id = await chunk(stores, clock)
    await claims.take(campaign_id, 0)
    await stores.chunks.finish(campaign_id, 0, ChunkStatus.DONE, 3, 0, clock(), "s1")
    assert await claims.take(campaign_id, 0) is NotTaken.CLOSED


async def test_this_pods_own_hold_is_taken_again(stores: Stores, registry: FakeRegistry,
                                                 clock: FakeClock) -> None:
    """A redelivery to the pod that holds the chunk (its channel closed, say)."""
    campaign_id = await chunk(stores, clock)
    await registry.beat(pod_beat("s1"))  # this pod: alive, of course
    claims = claims_of(stores, registry, clock)
    await claims.take(campaign_id, 0)
    again = await claims.take(campaign_id, 0)
    assert isinstance(again, ChunkState) and (again.owner, again.attempts) == ("s1", 1)


async def test_a_chunk_a_live_sender_holds_is_busy(stores: Stores, registry: FakeRegistry,
                                                   clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    await registry.beat(pod_beat("s2"))
    await claims_of(stores, registry, clock, "s2").take(campaign_id, 0)
    assert await claims_of(stores, registry, clock).take(campaign_id, 0) is NotTaken.BUSY
    assert (await state(stores, campaign_id)).owner == "s2"


async def test_a_dead_senders_chunk_is_taken_over(stores: Stores, registry: FakeRegistry,
                                                  clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    await claims_of(stores, registry, clock, "dead").take(campaign_id, 0)  # no heartbeat
    taken = await claims_of(stores, registry, clock).take(campaign_id, 0)
    assert isinstance(taken, ChunkState) and (taken.owner, taken.attempts) == ("dead", 1)
    assert (await state(stores, campaign_id)).attempts == 2


async def test_a_hold_past_its_time_is_taken_over_even_from_a_live_sender(
        stores: Stores, registry: FakeRegistry, clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    await registry.beat(pod_beat("s2"))
    await claims_of(stores, registry, clock, "s2").take(campaign_id, 0)
    clock.advance(HOLD_S + 1)
    assert isinstance(await claims_of(stores, registry, clock).take(campaign_id, 0), ChunkState)


async def test_of_two_senders_taking_a_chunk_at_once_one_gets_it(
        stores: Stores, registry: FakeRegistry, clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    taken = await asyncio.gather(*(claims_of(stores, registry, clock, f"s{i}").take(
        campaign_id, 0) for i in range(4)))
    assert sum(isinstance(t, ChunkState) for t in taken) == 1
    assert taken.count(NotTaken.BUSY) == 3
    assert (await state(stores, campaign_id)).attempts == 1


async def test_releasing_hands_the_chunk_back(stores: Stores, registry: FakeRegistry,
                                              clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    claims = claims_of(stores, registry, clock)
    await claims.take(campaign_id, 0)
    await claims.release(campaign_id, 0, refund=True)
    released = await state(stores, campaign_id)
    assert (released.owner, released.attempts) == (None, 0)


class Unreachable(FakeChunks):
    async def release(self, campaign_id: str, seq: int, pod_id: str, *, refund: bool) -> None:
        raise ConnectionError("MongoDB is away")


async def test_a_release_that_cannot_reach_the_store_is_left_to_the_hold_expiring(
        registry: FakeRegistry, clock: FakeClock) -> None:
    claims = ChunkClaims(Unreachable(), registry, "s1", HOLD_S, clock)
    await claims.release(new_id(), 0, refund=False)  # no error: the hold expires by itself


def test_one_delivery_of_a_chunk_at_a_time_is_handled_in_a_process(
        registry: FakeRegistry, clock: FakeClock) -> None:
    claims = ChunkClaims(FakeChunks(), registry, "s1", HOLD_S, clock)
    with (claims.first_here("c", 0) as first, claims.first_here("c", 0) as copy,
          claims.first_here("c", 1) as other):
        assert (first, copy, other) == (True, False, True)
    with claims.first_here("c", 0) as later:
        assert later


def test_a_delivery_that_failed_lets_the_next_one_in(registry: FakeRegistry,
                                                     clock: FakeClock) -> None:
    claims = ChunkClaims(FakeChunks(), registry, "s1", HOLD_S, clock)
    with pytest.raises(RuntimeError), claims.first_here("c", 0):
        raise RuntimeError("sending failed")
    with claims.first_here("c", 0) as next_one:
        assert next_one




async def test_a_takeover_and_the_holders_renewal_race_and_exactly_one_wins(
        stores: Stores, registry: FakeRegistry, clock: FakeClock) -> None:
    """A pod back from a freeze renews its claim with its fencing token while another takes the
    chunk over from it (read as dead): both writes are conditional on the token they read."""
    campaign_id = await chunk(stores, clock)
    frozen = claims_of(stores, registry, clock, pod_id="frozen")
    before = await frozen.take(campaign_id, 0)
    assert not isinstance(before, NotTaken)
    token = before.fence + 1
    taker = claims_of(stores, registry, clock, pod_id="taker")  # "frozen" has no heartbeat
    taken = await taker.take(campaign_id, 0)
    assert not isinstance(taken, NotTaken) and taken.owner == "frozen"
    assert await frozen.renew(campaign_id, 0, token) is None  # too late: it is the taker's
    state = await stores.chunks.state(campaign_id, 0)
    assert state is not None and state.owner == "taker"


async def test_a_renewal_first_fences_the_takeover_out(stores: Stores, registry: FakeRegistry,
                                                       clock: FakeClock) -> None:
    campaign_id = await chunk(stores, clock)
    frozen = claims_of(stores, registry, clock, pod_id="frozen")
    before = await frozen.take(campaign_id, 0)
    assert not isinstance(before, NotTaken)
    seen = await stores.chunks.state(campaign_id, 0)  # the taker reads: held by a dead pod
    assert seen is not None
    renewed = await frozen.renew(campaign_id, 0, before.fence + 1)
    assert renewed == before.fence + 2
    assert await stores.chunks.claim(campaign_id, 0, "taker", "frozen", clock(),
                                     fence=seen.fence) is None
