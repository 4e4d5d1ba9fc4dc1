"""Issue 30, point 6: a follow-up (retry, retarget, amend, correct) of a campaign sent as a staged
rollout keeps the rollout and its gate, in waves of its own recipients, unless the request says
otherwise: ``"rollout": null`` drops it, a rollout replaces it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from herald.contracts.http import CorrectRequest, RetargetRequest, RetryRequest
from herald.domain.documents import Campaign, CampaignCounts, Dispatch
from herald.domain.rollout import HaltWhen, Rollout, RolloutProgress, RolloutWave
from herald.domain.status import Status
from herald.service_layer.campaigns import CampaignCreator, IdempotencyMismatch
from herald.service_layer.ports import Stores
from tests.factories import ACTOR, insert
from tests.unit.fakes import FakeBus

ORIGINAL = Rollout((RolloutWave(2, 300), RolloutWave(20, 60), RolloutWave(100)),
                   HaltWhen(failure_rate_above=0.05, min_attempts=200))
OTHER = {"waves": [{"percent": 50, "hold_s": 10}, {"percent": 100}],
         "halt_when": {"failure_rate_above": 0.2}}
FollowUp = Callable[[CampaignCreator, str, dict[str, Any]], Awaitable[Campaign]]


async def _retry(creator: CampaignCreator, parent_id: str, body: dict[str, Any]) -> Campaign:
    made = await creator.retry(parent_id, ACTOR, request=RetryRequest.model_validate(body))
    assert made is not None
    return made


async def _retarget(creator: CampaignCreator, parent_id: str, body: dict[str, Any]) -> Campaign:
    made = await creator.retarget(parent_id, RetargetRequest.model_validate(body), ACTOR)
    assert made is not None
    return made


async def _amend(creator: CampaignCreator, parent_id: str, body: dict[str, Any]) -> Campaign:
    made = await creator.amend(parent_id, RetargetRequest.model_validate(body), ACTOR)
    assert made is not None
    return made


async def _correct(creator: CampaignCreator, parent_id: str, body: dict[str, Any]) -> Campaign:
    correction = await creator.correct(parent_id, CorrectRequest.model_validate(body), ACTOR)
    assert correction is not None and correction.retarget and correction.amend
    assert correction.retarget.rollout == correction.amend.rollout
    return correction.amend


FOLLOW_UPS = {"retry": _retry, "retarget": _retarget, "amend": _amend, "correct": _correct}


@pytest.fixture
def creator(stores: Stores, bus: FakeBus) -> CampaignCreator:
    return CampaignCreator(stores.campaigns, stores.idempotency, bus)


async def _rolled_out(stores: Stores) -> str:
    """A failed campaign that went out in a staged rollout: 5 sent, 3 failed, 2 unsent of 10."""
    return await insert(stores, status=Status.FAILED, rollout=ORIGINAL,
                        rollout_progress=RolloutProgress(wave=2),
                        counts=CampaignCounts(targeted=10, sent=5, failed=3),
                        dispatch=Dispatch(owner="d", next_seq=1, done=True))


@pytest.mark.parametrize("follow_up", FOLLOW_UPS.values(), ids=FOLLOW_UPS.keys())
async def test_a_follow_up_keeps_the_originals_rollout_and_gate_from_its_first_wave(
        stores: Stores, creator: CampaignCreator, follow_up: FollowUp) -> None:
    made = await follow_up(creator, await _rolled_out(stores), {})
    assert made.rollout == ORIGINAL
    assert made.rollout_progress == RolloutProgress()  # its own waves, from the first


@pytest.mark.parametrize("follow_up", FOLLOW_UPS.values(), ids=FOLLOW_UPS.keys())
async def test_rollout_null_drops_it_and_a_rollout_replaces_it(
        stores: Stores, creator: CampaignCreator, follow_up: FollowUp) -> None:
    parent_id = await _rolled_out(stores)
    dropped = await follow_up(creator, parent_id, {"rollout": None})
    assert (dropped.rollout, dropped.rollout_progress) == (None, None)
    replaced = await follow_up(creator, parent_id, {"rollout": OTHER})
    assert replaced.rollout == Rollout((RolloutWave(50, 10), RolloutWave(100)),
                                       HaltWhen(failure_rate_above=0.2, min_attempts=50))


async def test_a_follow_up_of_a_campaign_without_a_rollout_has_none(
        stores: Stores, creator: CampaignCreator) -> None:
    parent_id = await insert(stores, status=Status.FAILED,
                             counts=CampaignCounts(targeted=10, sent=5, failed=3),
                             dispatch=Dispatch(owner="d", next_seq=1, done=True))
    assert (await _retarget(creator, parent_id, {})).rollout is None
    assert (await _retry(creator, parent_id, {"rollout": OTHER})).rollout is not None


async def test_keeping_and_dropping_the_rollout_are_different_requests_for_one_key(
        stores: Stores, creator: CampaignCreator) -> None:
    parent_id = await _rolled_out(stores)
    kept = await creator.retarget(parent_id, RetargetRequest(), ACTOR, "key-1")
    again = await creator.retarget(parent_id, RetargetRequest.model_validate({}), ACTOR, "key-1")
    assert kept is not None and again is not None and again.id == kept.id
    with pytest.raises(IdempotencyMismatch):
        await creator.retarget(parent_id, RetargetRequest.model_validate({"rollout": None}),
                               ACTOR, "key-1")
