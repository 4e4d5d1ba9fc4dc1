"""A dispatcher pages a campaign's recipients into chunks: written, published, checkpointed,
resumable by another dispatcher, stopped at a chunk boundary, finished exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

import pytest

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    ChunkStatus,
    Dispatch,
    FollowUp,
    FollowUpOf,
    LocalTime,
)
from herald.domain.lanes import Route
from herald.domain.messages import SendChunk
from herald.domain.purpose import Purpose
from herald.domain.quiet_hours import QuietHoursChoice, QuietMode
from herald.domain.status import Status, Transition, Verdict
from herald.domain.suppression import Rule
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import unpaged, unsent
from herald.service_layer.sending.lifecycle import ChunkLifecycle, Tally
from herald.service_layer.stopping import Settler
from services.dispatcher.backpressure import Backpressure, shares_of
from services.dispatcher.main import RETRY_PAUSE_MAX_S, retry_pause_s
from services.dispatcher.paging import Paging
from tests.factories import EVERYONE, at, begin_cancel, device, insert, recipients_of
from tests.support import eventually
from tests.unit.fakes import FakeBus, FakeRegistry

LEASE_S = 30.0
LEASE = timedelta(seconds=LEASE_S)


class Dispatcher:
    """One dispatcher pod's paging, with switches for what happens around it."""

    def __init__(self, stores: Stores, bus: FakeBus, pod_id: str = "d1") -> None:
        self.stores = stores
        self.bus = bus
        self.pod_id = pod_id
        self.cancelled: set[str] = set()
        self.paused: set[str] = set()
        self.stopping = False
        self.lease_s = LEASE_S
        self.after_publish: Callable[[SendChunk], Awaitable[None]] | None = None
        self.backpressure: Backpressure | None = None

    async def publish(self, message: SendChunk) -> None:
        await self.bus.send_chunk(message)
        if self.after_publish is not None:
            await self.after_publish(message)

    async def verdict(self, campaign_id: str) -> Verdict:
        if campaign_id in self.cancelled:
            return Verdict.STOP
        return Verdict.HOLD if campaign_id in self.paused else Verdict.SEND

    def paging(self) -> Paging:
        settler = Settler(self.stores, FakeRegistry(), self.pod_id)
        return Paging(self.stores, self.publish, self.verdict, lambda: self.stopping,
                      self.pod_id, self.lease_s, self.backpressure, settled=settler.settled)

    async def claim(self, campaign_id: str, later_s: float = 0.0) -> Campaign:
        now = utcnow() + timedelta(seconds=later_s)
        claimed = await self.stores.campaigns.claim_for_dispatch(campaign_id, self.pod_id, now,
                                                                 now + LEASE)
        assert claimed is not None
        return claimed

    async def run(self, campaign_id: str, later_s: float = 0.0) -> None:
        """Claim the campaign (``later_s`` from now) and page it."""
        await self.paging().run(await self.claim(campaign_id, later_s))


@pytest.fixture
def dispatcher(stores: Stores, bus: FakeBus) -> Dispatcher:
    return Dispatcher(stores, bus)


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def register(stores: Stores, numbers: range, **fields: object) -> list[str]:
    await stores.devices.upsert([device(i, **fields) for i in numbers], utcnow())
    return [i async for i, _ in stores.devices.stream(EVERYONE, None, None)]


def tokens(*numbers: int) -> list[str]:
    return [f"tok-{i:05d}" for i in numbers]


def published(bus: FakeBus) -> list[tuple[int, list[str]]]:
    return [(m.seq, [r.token for r in m.recipients]) for m in bus.chunks]


async def test_an_audience_is_paged_into_chunks_of_chunk_size_each_checkpointed(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    ids = await register(stores, range(10))
    await stores.devices.upsert([device(99, push_enabled=False)], utcnow())
    campaign_id = await insert(stores, chunk_size=4)
    await dispatcher.run(campaign_id)
    paged = await stored(stores, campaign_id)
    chunks = [c.state async for c in stores.chunks.in_order(campaign_id)]
    assert published(bus) == [(0, tokens(0, 1, 2, 3)), (1, tokens(4, 5, 6, 7)),
                              (2, tokens(8, 9))]
    assert [(c.size, c.cursor, c.status) for c in chunks] == [
        (4, ids[3], ChunkStatus.PENDING), (4, ids[7], ChunkStatus.PENDING),
        (2, ids[9], ChunkStatus.PENDING)]
    assert (paged.dispatch.next_seq, paged.dispatch.done) == (3, True)
    assert (paged.counts.targeted, paged.progress.chunks_published) == (10, 3)
    assert paged.dispatch.until is not None and paged.dispatch.until > ids[9]  # the 99th
    assert paged.status is Status.IN_PROGRESS  # its chunks are still to be sent


async def test_devices_registered_after_paging_began_are_not_reached(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(6))
    campaign_id = await insert(stores, chunk_size=2)

    async def newcomers_arrive(_: SendChunk) -> None:
        await stores.devices.upsert([device(100 + len(bus.chunks))], utcnow())

    dispatcher.after_publish = newcomers_arrive
    await dispatcher.run(campaign_id)
    assert [t for _, chunk in published(bus) for t in chunk] == tokens(*range(6))


async def test_paging_resumes_after_a_chunk_its_dead_owner_wrote_but_never_checkpointed(
        stores: Stores, bus: FakeBus) -> None:
    """The chunk is published again as written, and paging goes on after it, even though the
    audience changed since: no device is skipped or reached twice."""
    ids = await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)
    await Dispatcher(stores, FakeBus(), "dead").claim(campaign_id)
    await stores.campaigns.fix_dispatch_bound(campaign_id, "dead", ids[-1])
    await stores.chunks.create(campaign_id, 0, recipients_of(tokens(0, 1, 2, 3)), ids[3],
                               utcnow())  # ...written, published maybe, then it died
    await stores.devices.mark_invalid(tokens(2), "UNREGISTERED", utcnow())  # paged already
    await Dispatcher(stores, bus, "d2").run(campaign_id, later_s=LEASE_S + 1)
    paged = await stored(stores, campaign_id)
    assert published(bus) == [(0, tokens(0, 1, 2, 3)), (1, tokens(4, 5, 6, 7)),
                              (2, tokens(8, 9))]
    assert (paged.dispatch.owner, paged.dispatch.takeovers) == ("d2", 1)
    assert (paged.counts.targeted, paged.dispatch.next_seq) == (10, 3)


async def test_paging_resumes_after_the_last_checkpoint(stores: Stores, bus: FakeBus) -> None:
    ids = await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)
    first = Dispatcher(stores, FakeBus(), "d1")

    async def stop_after_the_first_chunk(_: SendChunk) -> None:
        first.stopping = True

    first.after_publish = stop_after_the_first_chunk
    await first.run(campaign_id)
    await Dispatcher(stores, bus, "d2").run(campaign_id, later_s=0.001)
    paged = await stored(stores, campaign_id)
    assert published(bus) == [(1, tokens(4, 5, 6, 7)), (2, tokens(8, 9))]
    assert (paged.counts.targeted, paged.dispatch.next_seq, paged.dispatch.until) == (
        10, 3, ids[-1])


async def test_a_cancel_stops_paging_before_the_next_chunk(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)

    async def cancelled(_: SendChunk) -> None:
        dispatcher.cancelled.add(campaign_id)

    dispatcher.after_publish = cancelled
    await dispatcher.run(campaign_id)
    stopped = await stored(stores, campaign_id)
    assert published(bus) == [(0, tokens(0, 1, 2, 3))]
    assert (stopped.dispatch.next_seq, stopped.dispatch.done) == (1, False)
    assert stopped.dispatch.owner == "d1"
    assert stopped.dispatch.lease_until is not None and stopped.dispatch.lease_until > utcnow()


async def test_a_dispatcher_that_lost_its_lease_stops_paging(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)

    async def taken_over(_: SendChunk) -> None:
        await stores.campaigns.take_over(campaign_id, "d1", "d2", utcnow() + LEASE)

    dispatcher.after_publish = taken_over
    await dispatcher.run(campaign_id)
    lost = await stored(stores, campaign_id)
    assert published(bus) == [(0, tokens(0, 1, 2, 3))]  # d2 publishes it again, as written
    assert (lost.dispatch.owner, lost.dispatch.next_seq, lost.dispatch.done) == ("d2", 0,
                                                                                 False)


async def test_a_stopping_dispatcher_stops_at_a_chunk_boundary_and_lets_its_lease_go(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)

    async def stop(_: SendChunk) -> None:
        dispatcher.stopping = True

    dispatcher.after_publish = stop
    await dispatcher.run(campaign_id)
    later = utcnow() + timedelta(milliseconds=1)
    successor = await stores.campaigns.claim_for_dispatch(campaign_id, "d2", later,
                                                          later + LEASE)
    assert published(bus) == [(0, tokens(0, 1, 2, 3))]
    assert successor is not None and successor.dispatch.next_seq == 1


async def send_at_once(stores: Stores, message: SendChunk) -> None:
    """A sender that takes, sends and closes each chunk the moment it is published."""
    lifecycle = ChunkLifecycle(stores, "s1", settled=Settler(stores, FakeRegistry(), "s1").settled)
    await stores.chunks.claim(message.campaign_id, message.seq, "s1", None, utcnow() + LEASE)
    tally = Tally()
    await lifecycle.record(message.campaign_id, message.seq,
                           at([(p, None) for p in range(len(message.recipients))]), tally)
    await lifecycle.close(message.campaign_id, message.seq, tally.status, tally)


async def test_paging_finishes_dispatch_and_completes_a_campaign_whose_chunks_are_all_sent(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=4)

    async def sent(message: SendChunk) -> None:
        await send_at_once(stores, message)

    dispatcher.after_publish = sent
    await dispatcher.run(campaign_id)
    done = await stored(stores, campaign_id)
    assert done.status is Status.COMPLETED and done.dispatch.done
    assert done.counts == CampaignCounts(targeted=10, sent=10, failed=0)


async def test_an_empty_audience_completes_at_once(stores: Stores, bus: FakeBus,
                                                   dispatcher: Dispatcher) -> None:
    await register(stores, range(3), push_enabled=False)
    campaign_id = await insert(stores)
    await dispatcher.run(campaign_id)
    done = await stored(stores, campaign_id)
    assert bus.chunks == []
    assert done.status is Status.COMPLETED and done.counts == CampaignCounts()


async def test_a_follow_up_pages_exactly_the_unsent_of_its_parent(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    parent_id = await insert(stores, status=Status.CANCELLED, counts=CampaignCounts(targeted=6),
                             dispatch=Dispatch(owner="d", next_seq=2, done=True))
    for seq, numbers in enumerate(((0, 1, 2), (3, 4, 5))):
        await stores.chunks.create(parent_id, seq, recipients_of(tokens(*numbers)), None,
                                   utcnow())
    await stores.deliveries.record(parent_id, 0, "s1", at([(0, None), (1, None)]), utcnow())
    follow_up = await insert(stores, chunk_size=3, audience=None,
                             follow_up=FollowUp(parent_id, FollowUpOf.UNSENT))
    await dispatcher.run(follow_up)
    paged = await stored(stores, follow_up)
    assert published(bus) == [(0, tokens(2, 3, 4)), (1, tokens(5))]
    assert paged.dispatch.until is None and paged.counts.targeted == 4


async def test_a_local_time_campaign_pages_the_due_waves_and_parks_until_the_next(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    """09:00 local is past in Seoul, an hour away in UTC (devices without a zone) and six
    hours away in New York."""
    await register(stores, range(3), timezone="Asia/Seoul")
    await register(stores, range(3, 5), timezone="America/New_York")
    await register(stores, range(5, 7))
    wall = (utcnow() + timedelta(hours=1)).replace(tzinfo=None, microsecond=0)
    campaign_id = await insert(stores, audience=Audience(),
                               local_time=LocalTime(wall.isoformat(), "UTC"))
    await dispatcher.run(campaign_id)
    parked = await stored(stores, campaign_id)
    waves = parked.dispatch.waves
    assert waves is not None
    assert [(w.zones, w.others) for w in waves] == [(("Asia/Seoul",), False), (("UTC",), True),
                                                    (("America/New_York",), False)]
    assert published(bus) == [(0, tokens(0, 1, 2))]
    assert parked.dispatch.lease_until == wall.replace(tzinfo=UTC) == waves[1].due_at
    assert not parked.dispatch.done


# --- quiet hours: the zones inside the window are later waves, or skipped ------------------------
SEOUL = ZoneInfo("Asia/Seoul")


def quiet_in_seoul(mode: QuietMode) -> QuietHoursChoice:
    """A window from an hour ago to an hour from now in Seoul: quiet there, not in UTC (nine
    hours behind)."""
    seoul_now = utcnow().astimezone(SEOUL).replace(tzinfo=None, microsecond=0)
    window = f"{(seoul_now - timedelta(hours=1)):%H:%M:%S}-{(seoul_now + timedelta(hours=1)):%H:%M:%S}"
    return QuietHoursChoice(window, mode, "UTC")


async def marketing_devices(stores: Stores) -> None:
    await register(stores, range(3), timezone="Asia/Seoul", marketing_enabled=True)
    await register(stores, range(3, 5), timezone="Europe/London", marketing_enabled=True)
    await register(stores, range(5, 7), marketing_enabled=True)


async def test_quiet_hours_page_the_zones_outside_and_park_until_the_window_ends_inside(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await marketing_devices(stores)
    choice = quiet_in_seoul(QuietMode.HOLD)
    campaign_id = await insert(stores, purpose=Purpose.MARKETING, quiet_hours=choice)
    await dispatcher.run(campaign_id)
    parked = await stored(stores, campaign_id)
    waves = parked.dispatch.waves
    assert waves is not None
    assert [(w.zones, w.others, w.held) for w in waves] == [
        (("Europe/London", "UTC"), True, False), (("Asia/Seoul",), False, True)]
    assert published(bus) == [(0, tokens(3, 4, 5, 6))]
    assert parked.status is Status.IN_PROGRESS and not parked.dispatch.done
    assert parked.dispatch.lease_until == waves[1].due_at
    assert abs((waves[1].due_at - utcnow()).total_seconds() - 3600) < 5

    later = utcnow() + timedelta(seconds=3601)  # the window ended in Seoul
    monkeypatch.setattr("services.dispatcher.paging.utcnow", lambda: later)
    await dispatcher.run(campaign_id, later_s=3601)
    assert published(bus)[1:] == [(1, tokens(0, 1, 2))]
    assert (await stored(stores, campaign_id)).dispatch.done


async def test_quiet_hours_that_skip_page_everyone_at_once_marked_suppressed_inside(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await marketing_devices(stores)
    campaign_id = await insert(stores, purpose=Purpose.MARKETING,
                               quiet_hours=quiet_in_seoul(QuietMode.SKIP))

    async def sent(message: SendChunk) -> None:
        await send_at_once(stores, message)

    dispatcher.after_publish = sent
    await dispatcher.run(campaign_id)
    marked = {r.token: r.suppressed for m in bus.chunks for r in m.recipients}
    assert marked == {**dict.fromkeys(tokens(0, 1, 2), Rule.QUIET_HOURS),
                      **dict.fromkeys(tokens(3, 4, 5, 6))}
    assert (await stored(stores, campaign_id)).dispatch.done


async def test_quiet_hours_that_hold_nobody_page_the_audience_as_one(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(3), timezone="Europe/London", marketing_enabled=True)
    campaign_id = await insert(stores, purpose=Purpose.MARKETING,
                               quiet_hours=quiet_in_seoul(QuietMode.HOLD))
    transactional = await insert(stores, purpose=Purpose.TRANSACTIONAL,
                                 quiet_hours=quiet_in_seoul(QuietMode.HOLD))
    await register(stores, range(3, 4), timezone="Asia/Seoul", marketing_enabled=False)
    await dispatcher.run(campaign_id)
    await dispatcher.run(transactional)
    assert (await stored(stores, campaign_id)).dispatch.waves is None
    assert (await stored(stores, transactional)).dispatch.waves is None  # never held
    assert published(bus) == [(0, tokens(0, 1, 2)), (0, tokens(0, 1, 2, 3))]


# --- backpressure: no more than the bound waits in the queue ------------------------------------
BOUND = 8
MAX_QUEUED = shares_of(BOUND)[Route.STANDARD]
"""The standard lane's share of the bound: what one plain campaign may have waiting."""


def bounded(dispatcher: Dispatcher, bus: FakeBus) -> Dispatcher:
    dispatcher.backpressure = Backpressure(bus.chunks_ready, BOUND, poll_s=0.001)
    return dispatcher


async def queue_full(bus: FakeBus) -> bool:
    return len(bus.chunks) >= MAX_QUEUED


async def drain_while_paging(bus: FakeBus, paging: asyncio.Task[None]) -> list[int]:
    """Act as a sender that takes one chunk whenever the queue is full: the depths it saw."""
    depths: list[int] = []
    while not paging.done():
        depth = await bus.chunks_ready()
        depths.append(depth)
        if depth >= MAX_QUEUED:
            bus.delivered += 1
        await asyncio.sleep(0.002)
    await paging
    return depths


async def test_paging_pauses_while_the_queue_is_full_and_resumes_as_it_drains(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(20))
    campaign_id = await insert(stores, chunk_size=2)
    paging = asyncio.create_task(bounded(dispatcher, bus).run(campaign_id))
    depths = await drain_while_paging(bus, paging)
    paged = await stored(stores, campaign_id)
    assert max(depths) == MAX_QUEUED and len(bus.chunks) == 10
    assert (paged.dispatch.done, paged.counts.targeted) == (True, 20)


async def test_a_cancel_stops_a_paused_dispatcher(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(20))
    campaign_id = await insert(stores, chunk_size=2)
    paging = asyncio.create_task(bounded(dispatcher, bus).run(campaign_id))
    await eventually(lambda: queue_full(bus), timeout_s=5, what="a full queue")
    dispatcher.cancelled.add(campaign_id)
    await asyncio.wait_for(paging, timeout=5)
    stopped = await stored(stores, campaign_id)
    assert len(bus.chunks) == MAX_QUEUED
    assert (stopped.dispatch.next_seq, stopped.dispatch.done) == (MAX_QUEUED, False)


async def test_a_paused_dispatcher_renews_its_lease_and_stops_when_it_lost_it(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    await register(stores, range(20))
    campaign_id = await insert(stores, chunk_size=2)
    dispatcher.lease_s = 0.03
    claimed = await dispatcher.claim(campaign_id)
    paging = asyncio.create_task(bounded(dispatcher, bus).paging().run(claimed))
    await eventually(lambda: queue_full(bus), timeout_s=5, what="a full queue")
    first_lease = (await stored(stores, campaign_id)).dispatch.lease_until
    assert first_lease is not None

    async def renewed() -> bool:
        lease = (await stored(stores, campaign_id)).dispatch.lease_until
        return lease is not None and lease > first_lease

    await eventually(renewed, timeout_s=5, what="the paused dispatcher to renew its lease")
    await stores.campaigns.take_over(campaign_id, "d1", "d2", utcnow() + LEASE)
    await asyncio.wait_for(paging, timeout=5)
    assert len(bus.chunks) == MAX_QUEUED  # nothing more from the one that lost it


async def test_a_dispatcher_stopped_by_a_cancel_leaves_the_rest_beyond_its_checkpoint(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    """Issue 33: a cancelled campaign's unpaged part is not written anywhere at the cancel; it
    is the audience beyond the paging checkpoint, which the audit lists and the database
    counts."""
    await register(stores, range(20))
    campaign_id = await insert(stores, chunk_size=3)
    paging = asyncio.create_task(bounded(dispatcher, bus).run(campaign_id))
    await eventually(lambda: queue_full(bus), timeout_s=5, what="a full queue")
    await begin_cancel(stores, campaign_id)
    dispatcher.cancelled.add(campaign_id)
    await asyncio.wait_for(paging, timeout=5)
    stopped = await stored(stores, campaign_id)
    chunks = [c async for c in stores.chunks.in_order(campaign_id)]
    assert [(c.state.status, c.state.size) for c in chunks] == [
        (ChunkStatus.PENDING, 3)] * MAX_QUEUED
    assert (stopped.counts.targeted, stopped.dispatch.next_seq, stopped.dispatch.done) == (
        3 * MAX_QUEUED, MAX_QUEUED, False)
    assert await unpaged(stores, stopped) == 20 - 3 * MAX_QUEUED
    assert [line.token async for line in unsent(stores, stopped)] == tokens(*range(20))


async def test_a_pause_stops_paging_at_a_chunk_and_the_resume_goes_on_from_there(
        stores: Stores, bus: FakeBus, dispatcher: Dispatcher) -> None:
    """Issue 24: a dispatcher still paging when the campaign is paused stops at the next chunk,
    gives its lease up, and any dispatcher goes on from the checkpoint after the resume: every
    device paged once."""
    await register(stores, range(10))
    campaign_id = await insert(stores, chunk_size=2)

    async def pause_after_two(_: SendChunk) -> None:
        if len(bus.chunks) == 2:
            dispatcher.paused.add(campaign_id)
            await stores.campaigns.transition(campaign_id, Transition.PAUSE, utcnow())

    dispatcher.after_publish = pause_after_two
    await dispatcher.run(campaign_id)
    held = await stored(stores, campaign_id)
    assert (held.status, held.dispatch.next_seq, held.dispatch.done) == (Status.PAUSED, 2, False)
    assert held.dispatch.lease_until is not None and held.dispatch.lease_until <= utcnow()
    await stores.campaigns.transition(campaign_id, Transition.RESUME, utcnow())
    await Dispatcher(stores, bus, "d2").run(campaign_id, later_s=0.001)  # asked at the resume
    assert [t for _, chunk in published(bus) for t in chunk] == tokens(*range(10))
    assert (await stored(stores, campaign_id)).dispatch.done


def test_paging_that_keeps_failing_is_retried_later_and_later() -> None:
    """Issue 33: a failing read is not retried at once, again and again (a resume's read that
    timed out, retried every second, held the database and the api for minutes)."""
    pauses = [retry_pause_s(failures) for failures in range(1, 10)]
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert pauses[5:] == [RETRY_PAUSE_MAX_S] * 4
    assert retry_pause_s(10_000) == RETRY_PAUSE_MAX_S
