"""A chunk RabbitMQ gave up on (``dead_chunks.py``), on the fakes: its unrecorded recipients are
recorded failed and it closes; in a staged rollout, issue 30 point 6, only the recipients of the
waves opened so far fail, and the chunk waits, pending, for the next wave, whose recipients a
sender then sends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.documents import Campaign, ChunkState, ChunkStatus
from herald.domain.messages import SendChunk
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.rollout import Rollout, RolloutProgress, RolloutWave, wave_bucket
from herald.runtime.tracking import WorkTracker
from herald.service_layer.ports import Stores
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.sending.chunk import ChunkSender, SendingPolicy, Settlement
from herald.service_layer.sending.claims import ChunkClaims
from herald.service_layer.sending.dead_chunks import DEAD_LETTERED, DeadChunks
from herald.service_layer.sending.lifecycle import ChunkLifecycle
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from herald.service_layer.stopping import PodView
from tests.factories import recipients_of, sending_campaign
from tests.unit.fakes import FakeFcm, FakeFlags, FakeRegistry, UnlimitedBucket, UnlimitedLimits

POD = "s1"
MAX_ATTEMPTS = 3
TOKENS = [f"tok-{i}" for i in range(60)]
TWO_WAVES = Rollout((RolloutWave(30, 0), RolloutWave(100)))


def _claims(stores: Stores, registry: FakeRegistry) -> ChunkClaims:
    return ChunkClaims(stores.chunks, registry, POD, 60.0)


def _dead_chunks(stores: Stores, registry: FakeRegistry, cancelled: bool = False) -> DeadChunks:
    async def is_cancelled(_campaign_id: str) -> bool:
        return cancelled
    return DeadChunks(ChunkLifecycle(stores, POD), _claims(stores, registry), is_cancelled,
                      stores.campaigns)


def _sender(stores: Stores, registry: FakeRegistry, fcm: FakeFcm) -> ChunkSender:
    view = PodView(stores.campaigns, FakeFlags())
    window = SendWindow(fcm, WindowPolicy(connections=1, unrecorded=4, max_retries=0),
                        UnlimitedBucket())
    return ChunkSender(ChunkLifecycle(stores, POD), CampaignCache(stores.campaigns, view),
                       window, UnlimitedLimits(), _claims(stores, registry),
                       WorkTracker().working_on,
                       SendingPolicy(max_attempts=MAX_ATTEMPTS, budget_s=60.0))


async def _poisoned(stores: Stores, **changes: object) -> tuple[Campaign, SendChunk]:
    """A one-chunk campaign whose chunk failed ``MAX_ATTEMPTS`` times, its first recipient
    recorded sent by one of those attempts."""
    campaign = await sending_campaign(stores, [TOKENS], **changes)
    for _ in range(MAX_ATTEMPTS):
        await stores.chunks.claim(campaign.id, 0, "dead", None, utcnow() + timedelta(minutes=5))
        await stores.chunks.release(campaign.id, 0, "dead", refund=False)
    await stores.deliveries.record(campaign.id, 0, "dead",
                                   [RecipientOutcome(Target(0, TOKENS[0]), None)], utcnow())
    return campaign, SendChunk(campaign_id=campaign.id, seq=0, recipients=recipients_of(TOKENS))


async def _state(stores: Stores, campaign_id: str) -> ChunkState:
    found = await stores.chunks.state(campaign_id, 0)
    assert found is not None
    return found


async def _failed(stores: Stores, campaign_id: str) -> set[str]:
    recorded = await stores.deliveries.recorded(campaign_id, 0)
    return {TOKENS[p] for p, error in recorded.items() if error == DEAD_LETTERED}


async def test_a_rollouts_dead_chunk_fails_only_the_open_waves_and_waits_for_the_next(
        stores: Stores, registry: FakeRegistry) -> None:
    campaign, chunk = await _poisoned(stores, rollout=TWO_WAVES,
                                      rollout_progress=RolloutProgress())
    first = {t for t in TOKENS if wave_bucket(campaign.id, t) < 30}
    assert 1 < len(first) < len(TOKENS) - 1
    assert await _dead_chunks(stores, registry).settle(chunk)
    assert await _failed(stores, campaign.id) == first - {TOKENS[0]}
    state = await _state(stores, campaign.id)
    assert (state.status, state.owner, state.wave_sent, state.attempts) == (
        ChunkStatus.PENDING, None, 0, 0)

    await stores.campaigns.update_rollout(campaign.id, 0, RolloutProgress(wave=1))
    fcm = FakeFcm()
    assert await _sender(stores, registry, fcm).process(chunk, lambda: False) is Settlement.ACK
    assert sorted(fcm.sent) == sorted(set(TOKENS) - first - {TOKENS[0]}), "the next wave sent"
    assert (await _state(stores, campaign.id)).status is ChunkStatus.DONE


@pytest.mark.parametrize("changes", [
    {}, {"rollout": TWO_WAVES, "rollout_progress": RolloutProgress(wave=1)}],
    ids=["no rollout", "the last wave open"])
async def test_a_dead_chunk_with_every_wave_open_fails_its_whole_rest_and_closes(
        stores: Stores, registry: FakeRegistry, changes: dict[str, object]) -> None:
    campaign, chunk = await _poisoned(stores, **changes)
    assert await _dead_chunks(stores, registry).settle(chunk)
    assert await _failed(stores, campaign.id) == set(TOKENS[1:])
    assert (await _state(stores, campaign.id)).status is ChunkStatus.DEAD


async def test_a_dead_chunk_of_a_cancelled_rollout_closes_cancelled_failing_nobody(
        stores: Stores, registry: FakeRegistry) -> None:
    campaign, chunk = await _poisoned(stores, rollout=TWO_WAVES,
                                      rollout_progress=RolloutProgress())
    assert await _dead_chunks(stores, registry, cancelled=True).settle(chunk)
    assert await _failed(stores, campaign.id) == set()
    assert (await _state(stores, campaign.id)).status is ChunkStatus.CANCELLED
