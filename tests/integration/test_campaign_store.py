"""Conditional status changes, dispatch claims and leases, on the MongoDB wire server."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from herald.clock import utcnow
from herald.domain.status import Status, Transition
from herald.service_layer.ports import Stores
from tests.factories import cancelling, insert


async def test_a_transition_applies_only_from_its_source_statuses(stores: Stores) -> None:
    campaign_id = await insert(stores)
    refused = await stores.campaigns.transition(campaign_id, Transition.COMPLETE, utcnow())
    claimed = await stores.campaigns.transition(campaign_id, Transition.CLAIM, utcnow())
    stored = await stores.campaigns.get(campaign_id)
    assert refused is None
    assert claimed is not None and claimed.status is Status.IN_PROGRESS
    assert stored is not None and stored.status is Status.IN_PROGRESS


async def test_completion_racing_a_cancel_lets_exactly_one_win(stores: Stores) -> None:
    for _ in range(10):
        campaign_id = await insert(stores, status=Status.FINALIZING)
        complete, cancel = await asyncio.gather(
            stores.campaigns.transition(campaign_id, Transition.COMPLETE, utcnow()),
            stores.campaigns.transition(campaign_id, Transition.BEGIN_CANCEL, utcnow()))
        stored = await stores.campaigns.get(campaign_id)
        assert (complete is None) != (cancel is None)
        winner = complete or cancel
        assert winner is not None and stored is not None
        assert stored.status is winner.status


async def test_a_finishing_sender_never_overwrites_cancelling(stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.CANCELLING)
    for transition in (Transition.FINALIZE, Transition.COMPLETE, Transition.FAIL):
        assert await stores.campaigns.transition(campaign_id, transition, utcnow()) is None
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.status is Status.CANCELLING


async def test_eight_dispatchers_claiming_one_campaign_yield_one_owner(stores: Stores) -> None:
    campaign_id = await insert(stores)
    now = utcnow()
    claims = await asyncio.gather(*(
        stores.campaigns.claim_for_dispatch(campaign_id, f"pod-{i}", now, now + timedelta(seconds=30))
        for i in range(8)))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1
    assert winners[0].status is Status.IN_PROGRESS
    assert winners[0].started_at is not None


async def test_sweeping_claims_each_pending_campaign_once(stores: Stores) -> None:
    ids = {await insert(stores) for _ in range(12)}
    await insert(stores, due_in_s=60)  # scheduled, not due: never claimed by dispatchers
    now = utcnow()

    async def sweep(pod: str) -> list[str]:
        claimed = []
        while (c := await stores.campaigns.claim_for_dispatch(
                None, pod, now, now + timedelta(seconds=30))) is not None:
            claimed.append(c.id)
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
    assert taken is not None and taken.dispatch.owner == "alive"
    assert taken.dispatch.takeovers == 1
    assert not await stores.campaigns.checkpoint(first.id, "dead", 0, 500, utcnow())
    assert await stores.campaigns.checkpoint(first.id, "alive", 0, 500, utcnow())
    assert not await stores.campaigns.checkpoint(first.id, "alive", 0, 500, utcnow())
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored.counts.targeted == 500 and stored.dispatch.next_seq == 1


async def test_a_live_lease_is_not_taken_over(stores: Stores) -> None:
    campaign_id = await insert(stores)
    now = utcnow()
    await stores.campaigns.claim_for_dispatch(campaign_id, "alive", now, now + timedelta(seconds=30))
    assert await stores.campaigns.claim_for_dispatch(campaign_id, "other", utcnow(),
                                                     utcnow() + timedelta(seconds=30)) is None


async def test_due_scheduled_lists_only_due_campaigns_oldest_first(stores: Stores) -> None:
    scheduled = Status.SCHEDULED
    later = await insert(stores, due_in_s=-1, status=scheduled)
    earlier = await insert(stores, due_in_s=-5, status=scheduled)
    await insert(stores, due_in_s=60, status=scheduled)
    due = await stores.campaigns.due_scheduled(utcnow())
    assert [c.id for c in due] == [earlier, later]
    first = await stores.campaigns.get(earlier)
    assert first is not None
    assert await stores.campaigns.next_scheduled_due() == first.due_at


async def test_cancel_acknowledgements_accumulate_once_per_pod(stores: Stores) -> None:
    changes = cancelling(expected_pods=["a", "b"])
    campaign_id = await insert(stores, **changes)
    for pod in ("a", "a", "b"):
        await stores.campaigns.add_ack(campaign_id, changes["decision"], pod)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.cancel is not None
    assert sorted(stored.cancel.acks) == ["a", "b"]
