"""A campaign's live events (``herald/service_layer/campaign_events.py``): the state at once, an
event per change seen, keep-alives when quiet, the end at a final status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from herald.clock import utcnow
from herald.domain.documents import CampaignCounts, new_id
from herald.domain.status import Status, Transition
from herald.service_layer.campaign_events import (
    CampaignChanged,
    ChangeDetector,
    Event,
    KeepAlive,
    campaign_events,
)
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import Stores
from tests.factories import campaign, paged

Step = Callable[[], Awaitable[object]]


class ScriptedTicks:
    """A ``sleep`` that runs the next step of a script instead of waiting: each poll of the
    stream then reads the store as the step left it."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = steps
        self.ticks = 0

    async def __call__(self, _seconds: float) -> None:
        self.ticks += 1
        if self._steps:
            await self._steps.pop(0)()


def nothing() -> Step:
    async def step() -> None:
        return None
    return step


async def collect(stores: Stores, campaign_id: str, steps: list[Step],
                  keepalive_ticks: int = 100) -> list[Event]:
    ticks = ScriptedTicks(steps)
    events = await campaign_events(stores.campaigns, campaign_id, poll_s=1.0,
                                   keepalive_s=float(keepalive_ticks), sleep=ticks)
    return [event async for event in events]


def test_a_reading_that_changes_nothing_seen_is_no_event_until_a_quiet_stretch() -> None:
    detector = ChangeDetector(quiet_ticks=3)
    running = campaign(**paged(2, 1000))
    first = detector.observe(running)
    quiet = [detector.observe(running) for _ in range(3)]
    moved = detector.observe(replace(running, counts=CampaignCounts(targeted=1000, sent=500)))
    assert isinstance(first, CampaignChanged) and first.seq == 1 and not first.final
    assert quiet == [None, None, KeepAlive()]
    assert isinstance(moved, CampaignChanged) and moved.seq == 2


def test_a_final_status_makes_the_final_event() -> None:
    detector = ChangeDetector(quiet_ticks=10)
    detector.observe(campaign(**paged(1, 10)))
    done = detector.observe(campaign(status=Status.CANCELLED))
    assert isinstance(done, CampaignChanged) and done.final


async def test_events_follow_the_counts_and_end_at_the_final_status(stores: Stores) -> None:
    record = campaign(**paged(2, 1000))
    await stores.campaigns.insert(record)

    async def chunk() -> object:
        return await stores.campaigns.count_finished_chunk(record.id, 499, 1, done=True)

    def moved(transition: Transition) -> Step:
        return lambda: stores.campaigns.transition(record.id, transition, utcnow())

    steps: list[Step] = [nothing(), chunk, nothing(), chunk, moved(Transition.FINALIZE),
                         moved(Transition.COMPLETE), nothing(), nothing()]
    events = await collect(stores, record.id, steps)
    seen = [(e.seq, e.campaign.status, e.campaign.counts.sent) for e in events
            if isinstance(e, CampaignChanged)]
    assert seen == [(1, Status.IN_PROGRESS, 0), (2, Status.IN_PROGRESS, 499),
                    (3, Status.IN_PROGRESS, 998), (4, Status.FINALIZING, 998),
                    (5, Status.COMPLETED, 998)]


async def test_a_quiet_campaign_gets_keep_alives(stores: Stores) -> None:
    record = campaign(**paged(1, 10))
    await stores.campaigns.insert(record)
    steps: list[Step] = [nothing() for _ in range(7)]
    steps.append(lambda: stores.campaigns.transition(record.id, Transition.FAIL, utcnow()))
    events = await collect(stores, record.id, steps, keepalive_ticks=3)
    kinds = ["change" if isinstance(e, CampaignChanged) else "alive" for e in events]
    assert kinds == ["change", "alive", "alive", "change"]


async def test_a_finished_campaign_is_one_event_and_the_end(stores: Stores) -> None:
    record = campaign(status=Status.CANCELLED)
    await stores.campaigns.insert(record)
    events = await collect(stores, record.id, [])
    assert len(events) == 1 and isinstance(events[0], CampaignChanged) and events[0].final


async def test_an_unknown_campaign_is_refused_before_any_event(stores: Stores) -> None:
    with pytest.raises(CampaignNotFound):
        await campaign_events(stores.campaigns, new_id())
