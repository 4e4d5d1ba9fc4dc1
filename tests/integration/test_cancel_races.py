"""Seed 001's race cases at the service layer, on the real stores: whatever order the writes land
in, a campaign ends completed or cancelled, never both, and its numbers always add up."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from herald.adapters.redis import CancelFlags, PodRegistry
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.service_layer.cancellation import Cancellation, CannotCancel
from herald.service_layer.completion import chunk_finished
from herald.service_layer.recipients import final_counts
from herald.settings import Settings
from tests.integration.test_campaign_store import campaign


@pytest.fixture
def cancellation(stores: Stores, redis: Any, settings: Settings) -> Cancellation:
    keys = RedisKeys(settings.mongodb_database)
    return Cancellation(stores, CancelFlags(redis, keys, 60), PodRegistry(redis, keys, 5), bus=None,
                        pod_id="test-pod")


async def last_chunk_pending(stores: Stores) -> str:
    """A campaign with two chunks: the first finished and counted, the last recorded but open."""
    document = campaign(status=Status.IN_PROGRESS.value)
    document["dispatch"].update(owner="d", done=True, next_seq=2)
    document["progress"].update(chunks_published=2, chunks_done=1)
    document["counts"].update(targeted=4, sent=2)
    await stores.campaigns.insert(document)
    campaign_id, now = str(document["_id"]), utcnow()
    for seq in (0, 1):
        await stores.chunks.create(campaign_id, seq, [{"token": f"t{seq}{i}", "user_id": None}
                                                      for i in range(2)], None, now)
        await stores.deliveries.record(campaign_id, seq, "s", [(0, None), (1, None)], now)
    return campaign_id


@pytest.mark.parametrize("delay_cancel_s", [0.0, 0.001, 0.003, 0.006, 0.01])
async def test_cancel_racing_the_last_chunks_completion(
        stores: Stores, cancellation: Cancellation, delay_cancel_s: float) -> None:
    campaign_id = await last_chunk_pending(stores)

    async def cancel() -> None:
        await asyncio.sleep(delay_cancel_s)
        with contextlib.suppress(CannotCancel):
            await cancellation.request(campaign_id, "race", "test", broadcast=False)

    async def finish_last_chunk() -> None:
        await chunk_finished(stores, campaign_id, 2, 0, done=True)

    await asyncio.gather(cancel(), finish_last_chunk())
    await cancellation.try_finalize(campaign_id)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored["status"] in (Status.COMPLETED, Status.CANCELLED)
    counts = stored["counts"]
    assert (counts["targeted"], counts["sent"], counts["failed"]) == (4, 4, 0)
    assert (stored["cancel"] is not None) == (stored["status"] == Status.CANCELLED)


async def test_many_cancels_at_once_write_one_cancel_record(
        stores: Stores, cancellation: Cancellation) -> None:
    document = campaign(status=Status.IN_PROGRESS.value)
    await stores.campaigns.insert(document)
    campaign_id = str(document["_id"])
    outcomes = await asyncio.gather(*(
        cancellation.request(campaign_id, f"reason {i}", f"user {i}", broadcast=False)
        for i in range(20)))
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    winners = {(o.campaign["cancel"]["reason"], o.campaign["cancel"]["requested_at"])
               for o in outcomes}
    assert len(winners) == 1, "every caller sees the one cancel that won"
    assert stored["cancel"]["reason"] in {f"reason {i}" for i in range(20)}


async def test_a_cancelled_campaign_counts_exactly_what_was_recorded(
        stores: Stores, cancellation: Cancellation) -> None:
    campaign_id = await last_chunk_pending(stores)
    await cancellation.request(campaign_id, None, None, broadcast=False)
    cancelled = await cancellation.try_finalize(campaign_id)
    assert cancelled is not None
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    counts = await final_counts(stores, stored)
    assert stored["status"] == Status.CANCELLED
    assert (counts.targeted, counts.sent) == (stored["counts"]["targeted"], stored["counts"]["sent"])
