"""Conditional status changes, dispatch claims and leases, on the MongoDB wire server."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from herald.adapters.mongo import Document
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.status import Status, Transition
from herald.service_layer.campaigns import new_campaign_document


def campaign(due_in_s: float = 0.0, **overrides: object) -> Document:
    now = utcnow()
    document = new_campaign_document(
        content={"title": "t", "body": "b", "data": {}, "image_url": None}, name="c",
        audience={"push_enabled": True}, retarget=None, chunk_size=500, rate_per_s=None,
        due_at=now + timedelta(seconds=due_in_s), now=now, source="test")
    return {**document, **overrides}


async def insert(stores: Stores, **overrides: object) -> str:
    document = campaign(**overrides)  # type: ignore[arg-type]
    await stores.campaigns.insert(document)
    return str(document["_id"])


async def test_a_transition_applies_only_from_its_source_statuses(stores: Stores) -> None:
    campaign_id = await insert(stores)
    refused = await stores.campaigns.transition(campaign_id, Transition.COMPLETE, utcnow())
    claimed = await stores.campaigns.transition(campaign_id, Transition.CLAIM, utcnow())
    stored = await stores.campaigns.get(campaign_id)
    assert refused is None
    assert claimed is not None and claimed["status"] == Status.IN_PROGRESS
    assert stored is not None and stored["status"] == Status.IN_PROGRESS


async def test_completion_racing_a_cancel_lets_exactly_one_win(stores: Stores) -> None:
    for _ in range(10):
        campaign_id = await insert(stores, status=Status.FINALIZING.value)
        complete, cancel = await asyncio.gather(
            stores.campaigns.transition(campaign_id, Transition.COMPLETE, utcnow()),
            stores.campaigns.transition(campaign_id, Transition.BEGIN_CANCEL, utcnow()))
        stored = await stores.campaigns.get(campaign_id)
        assert (complete is None) != (cancel is None)
        winner = complete or cancel
        assert winner is not None and stored is not None
        assert stored["status"] == winner["status"]


async def test_a_finishing_sender_never_overwrites_cancelling(stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.CANCELLING.value)
    for transition in (Transition.FINALIZE, Transition.COMPLETE, Transition.FAIL):
        assert await stores.campaigns.transition(campaign_id, transition, utcnow()) is None
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored["status"] == Status.CANCELLING


async def test_eight_dispatchers_claiming_one_campaign_yield_one_owner(stores: Stores) -> None:
    campaign_id = await insert(stores)
    now = utcnow()
    claims = await asyncio.gather(*(
        stores.campaigns.claim_for_dispatch(campaign_id, f"pod-{i}", now, now + timedelta(seconds=30))
        for i in range(8)))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1
    assert winners[0]["status"] == Status.IN_PROGRESS
    assert winners[0]["started_at"] is not None


async def test_sweeping_claims_each_pending_campaign_once(stores: Stores) -> None:
    ids = {await insert(stores) for _ in range(12)}
    await insert(stores, due_in_s=60)  # scheduled, not due: never claimed by dispatchers
    now = utcnow()

    async def sweep(pod: str) -> list[str]:
        claimed = []
        while (c := await stores.campaigns.claim_for_dispatch(
                None, pod, now, now + timedelta(seconds=30))) is not None:
            claimed.append(str(c["_id"]))
        return claimed

    results = await asyncio.gather(*(sweep(f"pod-{i}") for i in range(3)))
    flat = [campaign_id for claimed in results for campaign_id in claimed]
    assert sorted(flat) == sorted(ids)


async def test_an_expired_lease_is_taken_over_and_the_old_owner_loses_its_checkpoint(
        stores: Stores) -> None:
    campaign_id = await insert(stores)
    now = utcnow()
    first = await stores.campaigns.claim_for_dispatch(campaign_id, "dead", now,
                                                      now - timedelta(seconds=1))
    assert first is not None
    taken = await stores.campaigns.claim_for_dispatch(campaign_id, "alive", utcnow(),
                                                      utcnow() + timedelta(seconds=30))
    assert taken is not None and taken["dispatch"]["owner"] == "alive"
    assert taken["dispatch"]["takeovers"] == 1
    assert not await stores.campaigns.checkpoint(first["_id"], "dead", 0, 500, utcnow())
    assert await stores.campaigns.checkpoint(first["_id"], "alive", 0, 500, utcnow())
    assert not await stores.campaigns.checkpoint(first["_id"], "alive", 0, 500, utcnow())
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored["counts"]["targeted"] == 500 and stored["dispatch"]["next_seq"] == 1


async def test_a_live_lease_is_not_taken_over(stores: Stores) -> None:
    campaign_id = await insert(stores)
    now = utcnow()
    await stores.campaigns.claim_for_dispatch(campaign_id, "alive", now, now + timedelta(seconds=30))
    assert await stores.campaigns.claim_for_dispatch(campaign_id, "other", utcnow(),
                                                     utcnow() + timedelta(seconds=30)) is None


async def test_due_scheduled_lists_only_due_campaigns_oldest_first(stores: Stores) -> None:
    scheduled = Status.SCHEDULED.value
    later = await insert(stores, due_in_s=-1, status=scheduled)
    earlier = await insert(stores, due_in_s=-5, status=scheduled)
    await insert(stores, due_in_s=60, status=scheduled)
    due = await stores.campaigns.due_scheduled(utcnow())
    assert [str(c["_id"]) for c in due] == [earlier, later]
    assert await stores.campaigns.next_scheduled_due() == (await stores.campaigns.get(earlier) or {})[
        "due_at"]


async def test_cancel_acknowledgements_accumulate_once_per_pod(stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.CANCELLING.value,
                               cancel={"expected_pods": ["a", "b"], "acks": []})
    for pod in ("a", "a", "b"):
        await stores.campaigns.add_cancel_ack(campaign_id, pod)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and sorted(stored["cancel"]["acks"]) == ["a", "b"]
