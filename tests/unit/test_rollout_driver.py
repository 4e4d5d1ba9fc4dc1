"""A staged rollout's driver (``herald/service_layer/rollout.py``) on fakes: the gate over waves,
and the operator's override (issue 30 point 3): a wave's hold is written before the gate looks,
a resume of a halted campaign opens the next wave, and from then on the gate judges only what
is recorded after it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.documents import Campaign, PauseKind
from herald.domain.rollout import HaltWhen, Rollout, RolloutProgress, RolloutWave, wave_bucket
from herald.domain.status import Status
from herald.service_layer.access import OperatorLog
from herald.service_layer.ports import Stores
from herald.service_layer.rollout import RolloutDriver
from herald.service_layer.stopping import Decider, Settler
from tests.factories import actor, at, sending_campaign
from tests.unit.fakes import FakeBus, FakeFlags, FakeRegistry

TOKENS = [f"tok-{i}" for i in range(200)]
GATE = HaltWhen(failure_rate_above=0.05, min_attempts=5)


class Rig:
    def __init__(self, stores: Stores, bus: FakeBus) -> None:
        self.stores = stores
        settler = Settler(stores, FakeRegistry(), "d1")
        self.decider = Decider(stores, FakeFlags(), FakeRegistry(), bus, settler.settle)
        self.driver = RolloutDriver(stores, self.decider, bus, OperatorLog(stores.operator_log))
        self.decider.on_resume(self.driver.after_resume)

    async def campaign(self, campaign_id: str) -> Campaign:
        found = await self.stores.campaigns.get(campaign_id)
        assert found is not None
        return found

    async def step(self, campaign_id: str) -> Campaign:
        await self.driver.advance(await self.campaign(campaign_id))
        return await self.campaign(campaign_id)

    async def send_wave(self, campaign: Campaign, wave: int, *, failing: float) -> int:
        """What senders do in wave ``wave``: record its recipients (``failing`` of them with
        an error that says nothing of the token) and mark the chunk's wave sent."""
        rollout = campaign.rollout
        assert rollout is not None
        low = 0.0 if wave == 0 else rollout.waves[wave - 1].percent
        high = rollout.waves[wave].percent
        positions = [p for p, token in enumerate(TOKENS)
                     if low <= wave_bucket(campaign.id, token) < high]
        cut = int(len(positions) * failing)
        outcomes = [(p, "UNSPECIFIED_ERROR" if i < cut else None)
                    for i, p in enumerate(positions)]
        # a wave's answers come after the decisions before it (a millisecond apart at least)
        await self.stores.deliveries.record(campaign.id, 0, "s1", at(outcomes),
                                            utcnow() + timedelta(milliseconds=10 * wave))
        await self.stores.chunks.mark_wave_sent(campaign.id, 0, wave)
        return len(positions)


@pytest.fixture
def rig(stores: Stores, bus: FakeBus) -> Rig:
    return Rig(stores, bus)


async def rolled_out(stores: Stores, *percents: float) -> Campaign:
    waves = tuple(RolloutWave(percent, hold_s=600) for percent in percents)
    return await sending_campaign(stores, [TOKENS], rollout=Rollout(waves, GATE),
                                  rollout_progress=RolloutProgress())


async def test_a_sent_wave_is_held_with_its_own_figures_before_the_gate_looks(rig: Rig) -> None:
    campaign = await rolled_out(rig.stores, 20, 100)
    sent = await rig.send_wave(campaign, 0, failing=0.0)
    held = await rig.step(campaign.id)
    progress = held.rollout_progress
    assert held.status is Status.IN_PROGRESS and progress is not None
    assert progress.hold_until is not None and progress.wave == 0
    assert [(f.failed, f.attempted) for f in progress.wave_figures] == [(0, sent)]


async def test_a_halted_rollout_resumed_goes_on_and_is_judged_from_the_override(
        rig: Rig, bus: FakeBus) -> None:
    campaign = await rolled_out(rig.stores, 20, 60, 100)
    await rig.send_wave(campaign, 0, failing=0.5)
    halted = await rig.step(campaign.id)
    assert halted.status is Status.PAUSED and halted.pause is not None
    assert halted.pause.kind is PauseKind.GATE
    assert halted.rollout_progress is not None and halted.rollout_progress.hold_until is not None
    await rig.stores.campaigns.settle_pause(campaign.id, halted.pause.pause_id,
                                           halted.counts, utcnow())

    resumed = await rig.decider.resume(campaign.id, actor("ops"))
    progress = resumed.rollout_progress
    assert resumed.status is Status.IN_PROGRESS and progress is not None
    assert (progress.wave, progress.hold_until) == (1, None), "the next wave, at once"
    assert progress.judged_since is not None

    offered = await rig.step(campaign.id)  # the open wave's kept chunks offered
    assert offered.status is Status.IN_PROGRESS
    assert offered.rollout_progress is not None and offered.rollout_progress.offered_wave == 1
    assert [m.seq for m in bus.chunks] == [0]
    await rig.send_wave(offered, 1, failing=0.0)
    held = await rig.step(campaign.id)
    assert held.status is Status.IN_PROGRESS, "the same figures do not halt it again"
    figures = held.rollout_progress.figures  # type: ignore[union-attr]
    assert figures.failed == 0 and figures.attempted > 0


async def test_after_an_override_a_later_wave_that_fails_halts_it_again(rig: Rig) -> None:
    campaign = await rolled_out(rig.stores, 20, 60, 100)
    await rig.send_wave(campaign, 0, failing=0.5)
    halted = await rig.step(campaign.id)
    assert halted.pause is not None
    await rig.stores.campaigns.settle_pause(campaign.id, halted.pause.pause_id,
                                           halted.counts, utcnow())
    await rig.decider.resume(campaign.id, actor("ops"))
    opened = await rig.step(campaign.id)
    await rig.send_wave(opened, 1, failing=0.5)
    again = await rig.step(campaign.id)
    assert again.status is Status.PAUSED and again.pause is not None
    assert again.pause.kind is PauseKind.GATE and "after wave 2" in (again.pause.reason or "")
    progress = again.rollout_progress
    assert progress is not None and len(progress.wave_figures) == 2
