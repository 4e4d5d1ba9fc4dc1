"""Issue 24's race cases at the service layer, on the real stores (nx-27017, Redis): a pause
racing a cancel ends cancelled or (paused, then) cancelled, never paused over a cancel; a resume
racing the completion of the last chunk ends completed exactly once with exact counts; many
pauses at once write one pause record."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from herald.clock import utcnow
from herald.domain.documents import CampaignCounts, ChunkStatus, Dispatch, Progress
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from herald.service_layer.stopping import CannotPause, CannotResume
from herald.settings import Settings
from tests.factories import actor, campaign
from tests.integration.helpers import Stopping, last_chunk_pending

DELAYS_S = [0.0, 0.001, 0.003, 0.006, 0.01]


@pytest.fixture
def cancellation(stores: Stores, redis: Any, settings: Settings) -> Stopping:
    return Stopping(stores, redis, settings)


@pytest.fixture
def pausing(cancellation: Stopping) -> Stopping:
    return cancellation


@pytest.mark.parametrize("delay_cancel_s", DELAYS_S)
async def test_pause_racing_a_cancel_ends_cancelled(
        stores: Stores, cancellation: Stopping, pausing: Stopping,
        delay_cancel_s: float) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)

    async def pause() -> None:
        with contextlib.suppress(CannotPause):
            await pausing.decider.pause(record.id, "race", actor("ops"))
            await pausing.finish(record.id)

    async def cancel() -> None:
        await asyncio.sleep(delay_cancel_s)
        await cancellation.decider.cancel(record.id, "race", actor("lead"))

    await asyncio.gather(pause(), cancel())
    await cancellation.finish(record.id)
    stored = await stores.campaigns.get(record.id)
    assert stored is not None
    assert stored.status is Status.CANCELLED, "a cancel always wins over a pause"
    assert stored.cancel is not None and stored.cancel.acknowledged_at is not None
    with pytest.raises(CannotPause):
        await pausing.decider.pause(record.id, "late", actor("ops"))


async def test_many_pauses_at_once_write_one_pause_record(
        stores: Stores, pausing: Stopping) -> None:
    record = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(record)
    outcomes = await asyncio.gather(*(
        pausing.decider.pause(record.id, f"reason {i}", actor(f"user {i}"))
        for i in range(12)))
    ids = {o.campaign.pause.pause_id for o in outcomes if o.campaign.pause is not None}
    assert len(ids) == 1, "every caller sees the one pause that won"
    assert sum(o.meaning.value == "stop_pods" for o in outcomes) == 1


@pytest.mark.parametrize("delay_resume_s", DELAYS_S)
async def test_resume_racing_the_last_chunks_completion_completes_once(
        stores: Stores, pausing: Stopping, delay_resume_s: float) -> None:
    """The last chunk closes while the campaign is paused (its finalize cannot move a paused
    campaign): whichever of the resume and the chunk's count lands second finishes it."""
    campaign_id = await last_chunk_pending(stores)
    await pausing.decider.pause(campaign_id, "hold", actor("ops"))
    settled = await pausing.finish(campaign_id)
    assert settled is not None and settled.pause is not None
    assert settled.pause.counts == CampaignCounts(targeted=4, sent=4, failed=0)

    async def resume() -> None:
        await asyncio.sleep(delay_resume_s)
        await pausing.decider.resume(campaign_id, actor("ops"))

    async def finish_last_chunk() -> None:
        await stores.chunks.finish(campaign_id, 1, ChunkStatus.DONE, 2, 0, utcnow(), owner=None)
        await pausing.chunk_finished(campaign_id, 2, 0, done=True)

    await asyncio.gather(resume(), finish_last_chunk())
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored.status is Status.COMPLETED
    assert stored.counts == CampaignCounts(targeted=4, sent=4, failed=0)
    with pytest.raises(CannotResume):
        await pausing.decider.resume(campaign_id, actor("ops"))


async def test_a_settled_paused_campaign_cancels_at_once_with_its_unsent_the_rest(
        stores: Stores, cancellation: Stopping, pausing: Stopping) -> None:
    record = campaign(status=Status.IN_PROGRESS,
                      dispatch=Dispatch(owner="d", done=True, next_seq=2),
                      progress=Progress(chunks_published=2, chunks_done=1),
                      counts=CampaignCounts(targeted=4, sent=2))
    await stores.campaigns.insert(record)
    await pausing.decider.pause(record.id, "hold", actor("ops"))
    assert await pausing.finish(record.id) is not None
    outcome = await cancellation.decider.cancel(record.id, "drop it", actor("lead"))
    assert outcome.status is Status.CANCELLED, "nothing in flight: finished before the answer"
    assert outcome.campaign.counts == CampaignCounts(targeted=4, sent=0, failed=0)
