"""Issue 24's race cases at the service layer, on the real stores (nx-27017, Redis): a pause
racing a cancel ends cancelled or (paused, then) cancelled, never paused over a cancel; a resume
racing the completion of the last chunk ends completed exactly once with exact counts; many
pauses at once write one pause record."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from herald.adapters.redis import RedisCancelFlags, RedisPodRegistry
from herald.clock import utcnow
from herald.domain.documents import CampaignCounts, ChunkStatus, Dispatch, Progress
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.service_layer.cancellation import Cancellation
from herald.service_layer.completion import chunk_finished
from herald.service_layer.pausing import CannotPause, CannotResume, Pausing
from herald.service_layer.ports import Stores
from herald.settings import Settings
from tests.factories import actor, campaign
from tests.integration.helpers import last_chunk_pending

DELAYS_S = [0.0, 0.001, 0.003, 0.006, 0.01]


@pytest.fixture
def registry(redis: Any, settings: Settings) -> RedisPodRegistry:
    return RedisPodRegistry(redis, RedisKeys(settings.mongodb_database), 5)


@pytest.fixture
def cancellation(stores: Stores, redis: Any, settings: Settings,
                 registry: RedisPodRegistry) -> Cancellation:
    keys = RedisKeys(settings.mongodb_database)
    return Cancellation(stores, RedisCancelFlags(redis, keys, 60), registry, bus=None,
                        pod_id="test-pod")


@pytest.fixture
def pausing(stores: Stores, registry: RedisPodRegistry) -> Pausing:
    return Pausing(stores, registry, bus=None, pod_id="test-pod")


@pytest.mark.parametrize("delay_cancel_s", DELAYS_S)
async def test_pause_racing_a_cancel_ends_cancelled(
        stores: Stores, cancellation: Cancellation, pausing: Pausing,
        delay_cancel_s: float) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)

    async def pause() -> None:
        with contextlib.suppress(CannotPause):
            await pausing.request(record.id, "race", actor("ops"), broadcast=False)
            await pausing.settle(record.id)

    async def cancel() -> None:
        await asyncio.sleep(delay_cancel_s)
        await cancellation.request(record.id, "race", actor("lead"), broadcast=False)

    await asyncio.gather(pause(), cancel())
    await cancellation.finish(record.id)
    stored = await stores.campaigns.get(record.id)
    assert stored is not None
    assert stored.status is Status.CANCELLED, "a cancel always wins over a pause"
    assert stored.cancel is not None and stored.cancel.acknowledged_at is not None
    with pytest.raises(CannotPause):
        await pausing.request(record.id, "late", actor("ops"), broadcast=False)


async def test_many_pauses_at_once_write_one_pause_record(
        stores: Stores, pausing: Pausing) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)
    outcomes = await asyncio.gather(*(
        pausing.request(record.id, f"reason {i}", actor(f"user {i}"), broadcast=False)
        for i in range(12)))
    ids = {o.campaign.pause.pause_id for o in outcomes if o.campaign.pause is not None}
    assert len(ids) == 1, "every caller sees the one pause that won"
    assert sum(o.decision.value == "stop_pods" for o in outcomes) == 1


@pytest.mark.parametrize("delay_resume_s", DELAYS_S)
async def test_resume_racing_the_last_chunks_completion_completes_once(
        stores: Stores, pausing: Pausing, delay_resume_s: float) -> None:
    """The last chunk closes while the campaign is paused (its finalize cannot move a paused
    campaign): whichever of the resume and the chunk's count lands second finishes it."""
    campaign_id = await last_chunk_pending(stores)
    await pausing.request(campaign_id, "hold", actor("ops"), broadcast=False)
    settled = await pausing.settle(campaign_id)
    assert settled is not None and settled.pause is not None
    assert settled.pause.counts == CampaignCounts(targeted=4, sent=4, failed=0)

    async def resume() -> None:
        await asyncio.sleep(delay_resume_s)
        await pausing.resume(campaign_id, actor("ops"))

    async def finish_last_chunk() -> None:
        await stores.chunks.finish(campaign_id, 1, ChunkStatus.DONE, 2, 0, utcnow(), owner=None)
        await chunk_finished(stores, campaign_id, 2, 0, done=True)

    await asyncio.gather(resume(), finish_last_chunk())
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored.status is Status.COMPLETED
    assert stored.counts == CampaignCounts(targeted=4, sent=4, failed=0)
    with pytest.raises(CannotResume):
        await pausing.resume(campaign_id, actor("ops"))


async def test_a_settled_paused_campaign_cancels_at_once_with_its_unsent_the_rest(
        stores: Stores, cancellation: Cancellation, pausing: Pausing) -> None:
    record = campaign(status=Status.IN_PROGRESS,
                      dispatch=Dispatch(owner="d", done=True, next_seq=2),
                      progress=Progress(chunks_published=2, chunks_done=1),
                      counts=CampaignCounts(targeted=4, sent=2))
    await stores.campaigns.insert(record)
    await pausing.request(record.id, "hold", actor("ops"), broadcast=False)
    assert await pausing.settle(record.id) is not None
    outcome = await cancellation.request(record.id, "drop it", actor("lead"), broadcast=False)
    assert outcome.status is Status.CANCELLED, "nothing in flight: finished before the answer"
    assert outcome.campaign.counts == CampaignCounts(targeted=4, sent=0, failed=0)
