"""What every implementation of the repositories must do: the same assertions for the in-memory
fakes (``tests/unit/test_fakes_contract.py``) and for the MongoDB stores.

A subclass named ``Test...`` provides a ``stores`` fixture (an empty stack) and inherits every
test. Only the ports' own methods are used, so a failure here is a difference of behaviour the
service layer could notice. Instants come from ``utcnow`` (MongoDB keeps milliseconds).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from herald.clock import utcnow
from herald.domain.audience import AttributeFilter, Audience, Platform, Zones
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    CancelRecord,
    ChunkState,
    ChunkStatus,
    Decision,
    DecisionKind,
    Dispatch,
    IdempotencyBinding,
    PauseRecord,
    ScheduleRunRecord,
    ScheduleState,
    TestOutcome,
    TestSend,
    new_id,
)
from herald.domain.erasure import ErasedPerson
from herald.domain.status import TERMINAL, Status, Transition, sources_for, target_of
from herald.domain.timing import Wave
from herald.service_layer.ports import Stores
from tests.factories import (
    EVERYONE,
    actor,
    at,
    begin_cancel,
    cancelling,
    device,
    insert,
    paged,
    recipients,
    schedule,
)
from tests.factories import campaign as new_campaign

LEASE = timedelta(seconds=30)


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def cancel_of(stores: Stores, campaign_id: str) -> CancelRecord:
    cancel = (await stored(stores, campaign_id)).cancel
    assert cancel is not None
    return cancel


async def chunk_state(stores: Stores, campaign_id: str, seq: int) -> ChunkState:
    state = await stores.chunks.state(campaign_id, seq)
    assert state is not None
    return state


async def claimed(stores: Stores, pod_id: str = "pod", **changes: Any) -> str:
    """A campaign claimed for paging by ``pod_id``."""
    campaign_id = await insert(stores, **changes)
    now = utcnow()
    assert await stores.campaigns.claim_for_dispatch(campaign_id, pod_id, now, now + LEASE)
    return campaign_id


class CampaignContract:
    # --- the transition table --------------------------------------------------------------------
    @pytest.mark.parametrize("transition", list(Transition))
    @pytest.mark.parametrize("status", list(Status))
    async def test_a_transition_applies_exactly_from_its_source_statuses(
            self, stores: Stores, transition: Transition, status: Status) -> None:
        campaign_id = await insert(stores, status=status)
        now = utcnow() + timedelta(seconds=1)
        moved = await stores.campaigns.transition(campaign_id, transition, now)
        after = await stored(stores, campaign_id)
        if status in sources_for(transition):
            assert moved is not None and moved == after
            assert (after.status, after.updated_at) == (target_of(transition), now)
        else:
            assert moved is None
            assert after.status is status and after.updated_at < now

    async def test_of_two_racing_transitions_exactly_one_wins(self, stores: Stores) -> None:
        for _ in range(5):
            campaign_id = await insert(stores, status=Status.FINALIZING)
            complete, cancel = await asyncio.gather(
                stores.campaigns.transition(campaign_id, Transition.COMPLETE, utcnow()),
                stores.campaigns.transition(campaign_id, Transition.BEGIN_CANCEL, utcnow()))
            assert (complete is None) != (cancel is None)
            assert (await stored(stores, campaign_id)) == (complete or cancel)

    async def test_unknown_and_malformed_ids_find_nothing(self, stores: Stores) -> None:
        now = utcnow()
        assert await stores.campaigns.get(new_id()) is None
        assert await stores.campaigns.get("not-an-id") is None
        assert await stores.campaigns.transition("not-an-id", Transition.CLAIM, now) is None
        assert await stores.campaigns.claim_for_dispatch("not-an-id", "pod", now, now) is None

    # --- named transitions and what they record --------------------------------------------------
    async def test_firing_records_when_and_by_whom(self, stores: Stores) -> None:
        campaign_id = await insert(stores, due_in_s=-1, status=Status.SCHEDULED)
        due_at, now = (await stored(stores, campaign_id)).due_at, utcnow()
        fired = await stores.campaigns.fire(campaign_id, now, "scheduler-1", due_at=due_at)
        assert fired is not None
        assert (fired.status, fired.fired_at, fired.fired_by) == (Status.PENDING, now,
                                                                  "scheduler-1")
        assert await stores.campaigns.fire(campaign_id, now, "scheduler-2",
                                           due_at=due_at) is None

    async def test_a_missed_campaign_records_why_and_when_it_finished(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, status=Status.SCHEDULED)
        due_at, now = (await stored(stores, campaign_id)).due_at, utcnow()
        missed = await stores.campaigns.miss(campaign_id, "too late", now, due_at=due_at)
        assert missed is not None
        assert (missed.status, missed.error, missed.finished_at) == (Status.MISSED, "too late",
                                                                     now)

    async def test_a_campaign_moved_since_it_was_read_as_due_is_neither_fired_nor_missed(
            self, stores: Stores) -> None:
        """Issue 30: the guarded write includes the ``due_at`` the scheduler read, so a
        ``PATCH`` that moved ``send_at`` later in between wins."""
        campaign_id = await insert(stores, due_in_s=-1, status=Status.SCHEDULED)
        read = await stored(stores, campaign_id)
        moved = replace(read, due_at=read.due_at + timedelta(hours=1))
        assert await stores.campaigns.patch_scheduled(moved, utcnow()) is not None
        now = utcnow()
        assert await stores.campaigns.fire(campaign_id, now, "s", due_at=read.due_at) is None
        assert await stores.campaigns.miss(campaign_id, "late", now, due_at=read.due_at) is None
        after = await stored(stores, campaign_id)
        assert (after.status, after.due_at) == (Status.SCHEDULED, moved.due_at)
        assert await stores.campaigns.fire(campaign_id, now, "s", due_at=after.due_at)

    @pytest.mark.parametrize(("transition", "error"), [(Transition.COMPLETE, None),
                                                       (Transition.FAIL, "2 failed")])
    async def test_finishing_writes_the_final_counts(self, stores: Stores, transition: Transition,
                                                     error: str | None) -> None:
        campaign_id = await insert(stores, status=Status.FINALIZING)
        now, counts = utcnow(), CampaignCounts(targeted=10, sent=7, failed=2)
        finished = await stores.campaigns.finish(campaign_id, transition, counts, error, now)
        assert finished is not None
        assert (finished.status, finished.counts, finished.error, finished.finished_at) == (
            target_of(transition), counts, error, now)

    async def test_a_begun_cancel_records_the_request_the_decision_and_the_pods_to_wait_for(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, status=Status.IN_PROGRESS)
        decision = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
        record = CancelRecord(requested_at=decision.at, reason="oops", expected_pods=("a", "b"),
                              decision_id=decision.id, requested_by=actor("ops"))
        cancelling_now = await stores.campaigns.begin_cancel(campaign_id, record, decision,
                                                             after=None, status=Status.IN_PROGRESS)
        assert cancelling_now is not None and cancelling_now.status is Status.CANCELLING
        assert (cancelling_now.cancel, cancelling_now.decision) == (record, decision)
        assert cancelling_now.finished_at is None

    @pytest.mark.parametrize("status", [Status.SCHEDULED, Status.PENDING,
                                        Status.AWAITING_APPROVAL, Status.PAUSED])
    async def test_a_cancel_before_anything_sends_is_begun_the_same_way(
            self, stores: Stores, status: Status) -> None:
        campaign_id = await insert(stores, status=status)
        begun = await begin_cancel(stores, campaign_id)
        assert begun is not None and begun.status is Status.CANCELLING

    async def test_a_decision_is_written_only_after_the_one_it_read(self, stores: Stores) -> None:
        """Of a cancel and a resume (or two pauses) decided on the same reading, one stands."""
        campaign_id = await insert(stores, status=Status.IN_PROGRESS)
        first = await begin_cancel(stores, campaign_id)
        assert first is not None and first.decision is not None
        stale = Decision(id=new_id(), kind=DecisionKind.PAUSE, at=utcnow())
        pause = PauseRecord(pause_id=stale.id, requested_at=stale.at)
        assert await stores.campaigns.begin_pause(campaign_id, pause, stale, after=None) is None
        again = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
        assert await stores.campaigns.begin_cancel(
            campaign_id, CancelRecord(requested_at=again.at), again, after=None,
            status=Status.IN_PROGRESS) is None
        later = await stores.campaigns.begin_cancel(
            campaign_id, CancelRecord(requested_at=again.at), again, after=first.decision,
            status=Status.CANCELLING)
        assert later is None  # cancelling is not a source of another cancel
        current = await stores.campaigns.get(campaign_id)
        assert current is not None and current.decision == first.decision

    async def test_acknowledgements_land_only_for_the_latest_decision(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, status=Status.IN_PROGRESS)
        begun = await begin_cancel(stores, campaign_id, expected_pods=("a", "b"))
        assert begun is not None and begun.decision is not None
        await stores.campaigns.add_ack(campaign_id, begun.decision, "a")
        await stores.campaigns.add_ack(campaign_id, begun.decision, "a")
        old = Decision(id=new_id(), kind=DecisionKind.CANCEL, at=utcnow())
        await stores.campaigns.add_ack(campaign_id, old, "b")
        current = await stores.campaigns.get(campaign_id)
        assert current is not None and current.cancel is not None
        assert current.cancel.acks == ("a",)

    async def test_confirming_a_cancel_writes_the_counts_and_the_acknowledgement(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, **cancelling(["a"]))
        now, counts = utcnow(), CampaignCounts(targeted=9, sent=4, failed=1)
        cancelled = await stores.campaigns.confirm_cancel(campaign_id, counts, now)
        assert cancelled is not None and cancelled.cancel is not None
        assert (cancelled.status, cancelled.counts, cancelled.finished_at) == (
            Status.CANCELLED, counts, now)
        assert cancelled.cancel.acknowledged_at == now
        assert cancelled.cancel.expected_pods == ("a",)

    # --- creation, listing and edits -------------------------------------------------------------
    async def test_a_campaign_is_inserted_once(self, stores: Stores) -> None:
        record = new_campaign()
        await stores.campaigns.insert(record)
        with pytest.raises(DuplicateKeyError):
            await stores.campaigns.insert(record)

    async def test_the_first_run_of_a_run_key_stands(self, stores: Stores) -> None:
        first = new_campaign(run_key="schedule:09:00")
        second = new_campaign(run_key="schedule:09:00")
        assert await stores.campaigns.insert_run(first) == first
        assert await stores.campaigns.insert_run(second) == first
        assert await stores.campaigns.get(second.id) is None

    async def test_pages_are_newest_first_filtered_and_continue_before_a_cursor(
            self, stores: Stores) -> None:
        oldest = await insert(stores)
        middle = await insert(stores, status=Status.COMPLETED)
        newest = await insert(stores)
        page = await stores.campaigns.page(None, None, 2)
        rest = await stores.campaigns.page(None, middle, 10)
        pending = await stores.campaigns.page([Status.PENDING], None, 10)
        assert [c.id for c in page] == [newest, middle]
        assert [c.id for c in rest] == [oldest]
        assert [c.id for c in pending] == [newest, oldest]
        assert [c.id for c in await stores.campaigns.with_status(Status.PENDING)] == [oldest,
                                                                                      newest]

    async def test_due_scheduled_lists_the_due_campaigns_earliest_first(
            self, stores: Stores) -> None:
        later = await insert(stores, due_in_s=-1, status=Status.SCHEDULED)
        earlier = await insert(stores, due_in_s=-5, status=Status.SCHEDULED)
        await insert(stores, due_in_s=60, status=Status.SCHEDULED)
        await insert(stores, due_in_s=-9)  # pending: not the scheduler's any more
        due = await stores.campaigns.due_scheduled(utcnow())
        assert [c.id for c in due] == [earlier, later]
        assert await stores.campaigns.next_scheduled_due() == due[0].due_at

    async def test_nothing_scheduled_has_no_next_due(self, stores: Stores) -> None:
        await insert(stores)
        assert await stores.campaigns.next_scheduled_due() is None

    async def test_a_campaign_is_patched_only_while_scheduled(self, stores: Stores) -> None:
        campaign_id = await insert(stores, due_in_s=60, status=Status.SCHEDULED)
        current = await stored(stores, campaign_id)
        edited = replace(current, name="renamed", due_at=current.due_at + timedelta(hours=1),
                         counts=CampaignCounts(targeted=99))  # not a field a patch may change
        now = utcnow()
        patched = await stores.campaigns.patch_scheduled(edited, now)
        assert patched is not None
        assert (patched.name, patched.due_at, patched.updated_at) == ("renamed", edited.due_at,
                                                                      now)
        assert patched.counts == CampaignCounts()
        await stores.campaigns.fire(campaign_id, now, "scheduler", due_at=patched.due_at)
        assert await stores.campaigns.patch_scheduled(edited, now) is None

    # --- dispatch: claims, leases, checkpoints ---------------------------------------------------
    async def test_eight_dispatchers_claiming_one_campaign_yield_one_owner(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores)
        now = utcnow()
        claims = await asyncio.gather(*(stores.campaigns.claim_for_dispatch(
            campaign_id, f"pod-{i}", now, now + LEASE) for i in range(8)))
        winners = [c for c in claims if c is not None]
        assert len(winners) == 1
        winner = winners[0]
        assert (winner.status, winner.started_at) == (Status.IN_PROGRESS, now)
        assert (winner.dispatch.lease_until, winner.dispatch.takeovers) == (now + LEASE, 0)
        assert winner == await stored(stores, campaign_id)

    async def test_a_campaign_not_yet_due_is_not_claimed(self, stores: Stores) -> None:
        campaign_id = await insert(stores, due_in_s=60)
        now = utcnow()
        assert await stores.campaigns.claim_for_dispatch(campaign_id, "pod", now,
                                                         now + LEASE) is None
        assert await stores.campaigns.claim_for_dispatch(None, "pod", now, now + LEASE) is None

    async def test_sweeping_claims_each_pending_campaign_once_oldest_first(
            self, stores: Stores) -> None:
        ids = [await insert(stores) for _ in range(6)]

        async def sweep(pod_id: str) -> list[str]:
            taken = []
            while (c := await stores.campaigns.claim_for_dispatch(
                    None, pod_id, utcnow(), utcnow() + LEASE)) is not None:
                taken.append(c.id)
            return taken

        single = await sweep("first")
        assert single == ids
        more = [await insert(stores) for _ in range(6)]
        swept = await asyncio.gather(*(sweep(f"pod-{i}") for i in range(3)))
        assert sorted(c for taken in swept for c in taken) == sorted(more)

    async def test_an_expired_lease_is_taken_over_and_the_old_owner_loses_its_checkpoint(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores)
        now = utcnow()
        await stores.campaigns.claim_for_dispatch(campaign_id, "dead", now, now - LEASE)
        taken = await stores.campaigns.claim_for_dispatch(campaign_id, "alive", now, now + LEASE)
        assert taken is not None
        assert (taken.dispatch.owner, taken.dispatch.takeovers) == ("alive", 1)
        assert not await stores.campaigns.checkpoint(campaign_id, "dead", 0, 500, now)
        assert await stores.campaigns.checkpoint(campaign_id, "alive", 0, 500, now + LEASE)

    async def test_a_live_lease_is_not_taken_over(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "alive")
        now = utcnow()
        assert await stores.campaigns.claim_for_dispatch(campaign_id, "other", now,
                                                         now + LEASE) is None

    async def test_a_fully_paged_campaign_is_not_claimed_when_its_lease_ends(
            self, stores: Stores) -> None:
        now = utcnow()
        await insert(stores, **{**paged(2, 10), "dispatch": Dispatch(
            owner="gone", lease_until=now - LEASE, next_seq=2, done=True)})
        assert await stores.campaigns.claim_for_dispatch(None, "pod", now, now + LEASE) is None

    async def test_a_lease_is_renewed_only_by_its_owner_while_paging(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "owner")
        later = utcnow() + timedelta(minutes=5)
        assert await stores.campaigns.renew_lease(campaign_id, "owner", later)
        assert not await stores.campaigns.renew_lease(campaign_id, "other", later)
        assert (await stored(stores, campaign_id)).dispatch.lease_until == later
        await stores.campaigns.finish_dispatch(campaign_id, "owner", utcnow())
        assert not await stores.campaigns.renew_lease(campaign_id, "owner",
                                                      later + timedelta(minutes=1))

    async def test_take_over_takes_only_from_the_owner_named(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "dead")
        until = utcnow() + LEASE
        assert await stores.campaigns.take_over(campaign_id, "someone", "me", until) is None
        taken = await stores.campaigns.take_over(campaign_id, "dead", "me", until)
        assert taken is not None
        assert (taken.dispatch.owner, taken.dispatch.lease_until, taken.dispatch.takeovers) == (
            "me", until, 1)

    async def test_a_checkpoint_counts_each_chunk_once_at_its_seq(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "pod")
        until = utcnow() + LEASE
        assert await stores.campaigns.checkpoint(campaign_id, "pod", 0, 500, until)
        assert not await stores.campaigns.checkpoint(campaign_id, "pod", 0, 500, until)
        assert not await stores.campaigns.checkpoint(campaign_id, "pod", 2, 500, until)
        assert not await stores.campaigns.checkpoint(campaign_id, "other", 1, 500, until)
        assert await stores.campaigns.checkpoint(campaign_id, "pod", 1, 120, until)
        after = await stored(stores, campaign_id)
        assert (after.dispatch.next_seq, after.dispatch.lease_until) == (2, until)
        assert (after.counts.targeted, after.progress.chunks_published) == (620, 2)

    async def test_dispatch_finishes_once_and_only_for_its_owner(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "pod")
        now = utcnow()
        assert await stores.campaigns.finish_dispatch(campaign_id, "other", now) is None
        finished = await stores.campaigns.finish_dispatch(campaign_id, "pod", now)
        assert finished is not None
        assert (finished.dispatch.done, finished.dispatch.lease_until) == (True, now)
        assert await stores.campaigns.finish_dispatch(campaign_id, "pod", now) is None

    async def test_the_dispatch_bound_is_fixed_once_by_the_owner(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "pod")
        first, second = new_id(), new_id()
        waves = [Wave(due_at=utcnow(), zones=("Asia/Seoul",), others=True)]
        await stores.campaigns.fix_dispatch_bound(campaign_id, "other", first)
        assert (await stored(stores, campaign_id)).dispatch.until is None
        bounded = await stores.campaigns.fix_dispatch_bound(campaign_id, "pod", first, waves)
        again = await stores.campaigns.fix_dispatch_bound(campaign_id, "pod", second, [])
        assert bounded is not None and again is not None
        assert (bounded.dispatch.until, bounded.dispatch.waves) == (first, tuple(waves))
        assert again == bounded

    async def test_releasing_dispatch_moves_the_lease_end(self, stores: Stores) -> None:
        campaign_id = await claimed(stores, "pod")
        until = utcnow() + timedelta(hours=3)
        await stores.campaigns.release_dispatch(campaign_id, "other", until)
        assert (await stored(stores, campaign_id)).dispatch.lease_until != until
        await stores.campaigns.release_dispatch(campaign_id, "pod", until)
        assert (await stored(stores, campaign_id)).dispatch.lease_until == until

    # --- counting chunks -------------------------------------------------------------------------
    async def test_finished_chunks_add_to_the_live_counts(self, stores: Stores) -> None:
        campaign_id = await insert(stores, **paged(3, 30))
        await stores.campaigns.count_finished_chunk(campaign_id, 8, 2, done=True)
        await stores.campaigns.count_finished_chunk(campaign_id, 4, 0, done=False)
        counted = await stores.campaigns.count_finished_chunk(campaign_id, 10, 0, done=True)
        assert counted is not None
        assert counted.counts == CampaignCounts(targeted=30, sent=22, failed=2)
        assert counted.progress.chunks_done == 2 and not counted.all_chunks_finished

    async def test_a_cancelling_campaign_still_counts_finished_chunks(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, **cancelling())
        counted = await stores.campaigns.count_finished_chunk(campaign_id, 3, 1, done=False)
        assert counted is not None and (counted.counts.sent, counted.counts.failed) == (3, 1)

    @pytest.mark.parametrize("status", sorted(TERMINAL))
    async def test_a_campaign_already_finished_keeps_its_counts(self, stores: Stores,
                                                                status: Status) -> None:
        counts = CampaignCounts(targeted=10, sent=9, failed=1)
        campaign_id = await insert(stores, status=status, counts=counts)
        assert await stores.campaigns.count_finished_chunk(campaign_id, 5, 0, done=True) is None
        assert (await stored(stores, campaign_id)).counts == counts

    # --- the cancel protocol ---------------------------------------------------------------------
    async def test_one_pod_finalizes_a_cancel_until_its_claim_expires(
            self, stores: Stores) -> None:
        campaign_id = await insert(stores, **cancelling())
        now = utcnow()
        wins = await asyncio.gather(*(stores.campaigns.claim_cancel_finalization(
            campaign_id, f"pod-{i}", now, now + LEASE) for i in range(4)))
        assert sorted(wins) == [False, False, False, True]
        later = now + LEASE + timedelta(seconds=1)
        assert await stores.campaigns.claim_cancel_finalization(campaign_id, "late", later,
                                                                later + LEASE)
        cancel = await cancel_of(stores, campaign_id)
        assert (cancel.finalizer, cancel.finalizer_until) == ("late", later + LEASE)

    async def test_a_stale_finalizer_elsewhere_lets_nobody_claim_this_cancel_twice(
            self, stores: Stores) -> None:
        """A finished cancel keeps its (expired) finalizer claim; claiming the finalization of
        another campaign must neither match it nor let two pods in."""
        now = utcnow()
        earlier = await insert(stores, **cancelling())
        assert await stores.campaigns.claim_cancel_finalization(earlier, "old", now, now)
        await stores.campaigns.confirm_cancel(earlier, CampaignCounts(), now)
        current = await insert(stores, **cancelling())
        later = now + timedelta(seconds=1)
        first = await stores.campaigns.claim_cancel_finalization(current, "a", later,
                                                                 later + LEASE)
        second = await stores.campaigns.claim_cancel_finalization(current, "b", later,
                                                                  later + LEASE)
        assert (first, second) == (True, False)
        assert (await cancel_of(stores, current)).finalizer == "a"
        assert (await cancel_of(stores, earlier)).finalizer == "old"

    async def test_only_a_cancelling_campaign_is_finalized(self, stores: Stores) -> None:
        campaign_id = await insert(stores, status=Status.IN_PROGRESS)
        now = utcnow()
        assert not await stores.campaigns.claim_cancel_finalization(campaign_id, "pod", now,
                                                                    now + LEASE)

    async def test_cancel_acknowledgements_accumulate_once_per_pod(self, stores: Stores) -> None:
        changes = cancelling(["a", "b"])
        campaign_id = await insert(stores, **changes)
        for pod_id in ("a", "a", "b"):
            await stores.campaigns.add_ack(campaign_id, changes["decision"], pod_id)
        assert sorted((await cancel_of(stores, campaign_id)).acks) == ["a", "b"]

    # --- follow-ups ------------------------------------------------------------------------------
    async def test_amends_are_listed_on_their_original_once_each_oldest_first(
            self, stores: Stores) -> None:
        """Every campaign is inserted with an empty ``amended_by``: nx-27017's ``$addToSet``
        on a missing field does nothing (MongoDB would create the array)."""
        original = await insert(stores, status=Status.CANCELLED)
        assert (await stored(stores, original)).amended_by == ()
        first, second = new_id(), new_id()
        for amend_id in (first, second, first):
            await stores.campaigns.link_amendment(original, amend_id)
        assert (await stored(stores, original)).amended_by == (first, second)

    async def test_linking_to_an_unknown_campaign_creates_nothing(self, stores: Stores) -> None:
        missing = new_id()
        await stores.campaigns.link_amendment(missing, new_id())
        assert await stores.campaigns.get(missing) is None

    # --- what the dispatchers' sweep lists -------------------------------------------------------
    async def test_the_sweep_lists_find_paging_paged_and_stuck_campaigns(
            self, stores: Stores) -> None:
        paging = await insert(stores, **paged(1, 5, done=False))
        paged_open = await insert(stores, **paged(2, 10))
        stuck = await insert(stores, status=Status.FINALIZING)
        await insert(stores, status=Status.COMPLETED)
        later = utcnow() + timedelta(seconds=1)
        assert [c.id for c in await stores.campaigns.paging()] == [paging]
        assert [c.id for c in await stores.campaigns.paged_and_open()] == [paged_open]
        assert [c.id for c in await stores.campaigns.stuck_finalizing(later)] == [stuck]
        assert await stores.campaigns.stuck_finalizing(later - timedelta(minutes=1)) == []


class ChunkContract:
    async def test_the_first_writer_of_a_chunk_wins(self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        first = await stores.chunks.create(campaign_id, 0, recipients(0, 3), "c1", now)
        second = await stores.chunks.create(campaign_id, 0, recipients(5, 9), "c2", now)
        assert second == first
        assert (first.state.size, first.state.cursor, first.state.attempts) == (3, "c1", 0)
        assert [r.token for r in first.recipients] == ["tok-00000", "tok-00001", "tok-00002"]
        assert await stores.chunks.get(campaign_id, 0) == first
        assert await stores.chunks.state(campaign_id, 0) == first.state
        assert await stores.chunks.get(campaign_id, 1) is None

    async def test_claiming_counts_an_attempt_and_returns_the_state_before(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, now)
        before = await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
        assert before is not None and (before.owner, before.attempts) == (None, 0)
        held = await stores.chunks.state(campaign_id, 0)
        assert held is not None
        assert (held.owner, held.owner_until, held.attempts) == ("a", now + LEASE, 1)

    async def test_a_chunk_is_taken_only_from_the_holder_named(self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, now)
        claims = await asyncio.gather(*(stores.chunks.claim(campaign_id, 0, f"pod-{i}", None,
                                                            now + LEASE) for i in range(4)))
        assert sum(c is not None for c in claims) == 1
        holder = (await chunk_state(stores, campaign_id, 0)).owner
        assert await stores.chunks.claim(campaign_id, 0, "late", "someone", now) is None
        taken = await stores.chunks.claim(campaign_id, 0, "late", holder, now + LEASE)
        assert taken is not None and taken.owner == holder and taken.attempts == 1

    async def test_releasing_gives_the_chunk_back_and_a_refund_takes_back_the_attempt(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, now)
        await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
        await stores.chunks.release(campaign_id, 0, "b", refund=True)  # not b's to give back
        assert (await chunk_state(stores, campaign_id, 0)).owner == "a"
        await stores.chunks.release(campaign_id, 0, "a", refund=True)
        refunded = await stores.chunks.state(campaign_id, 0)
        await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
        await stores.chunks.release(campaign_id, 0, "a", refund=False)
        counted = await stores.chunks.state(campaign_id, 0)
        assert refunded is not None and (refunded.owner, refunded.attempts) == (None, 0)
        assert counted is not None and (counted.owner, counted.attempts) == (None, 1)

    async def test_a_chunk_waiting_for_its_next_wave_is_given_back_with_attempts_afresh(
            self, stores: Stores) -> None:
        """Issue 30: a staged rollout's dead-lettered chunk waits, pending, for its next wave."""
        campaign_id, now = new_id(), utcnow()
        await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, now)
        for _ in range(3):
            await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
            await stores.chunks.release(campaign_id, 0, "a", refund=False)
        await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
        assert not await stores.chunks.wait_for_next_wave(campaign_id, 0, "b", 0)  # not b's
        assert await stores.chunks.wait_for_next_wave(campaign_id, 0, "a", 0)
        waiting = await chunk_state(stores, campaign_id, 0)
        assert (waiting.status, waiting.owner, waiting.wave_sent, waiting.attempts) == (
            ChunkStatus.PENDING, None, 0, 0)
        assert not await stores.chunks.wait_for_next_wave(campaign_id, 0, "a", 1)  # let go

    async def test_a_chunk_is_closed_once_and_only_by_its_holder(self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, now)
        await stores.chunks.claim(campaign_id, 0, "a", None, now + LEASE)
        assert not await stores.chunks.finish(campaign_id, 0, ChunkStatus.DONE, 3, 0, now, "b")
        assert await stores.chunks.finish(campaign_id, 0, ChunkStatus.DONE, 2, 1, now, "a")
        assert not await stores.chunks.finish(campaign_id, 0, ChunkStatus.DEAD, 0, 3, now, "a")
        closed = await stores.chunks.state(campaign_id, 0)
        assert closed is not None
        assert (closed.status, closed.sent, closed.failed, closed.finished_at, closed.owner) == (
            ChunkStatus.DONE, 2, 1, now, None)
        assert await stores.chunks.claim(campaign_id, 0, "c", None, now + LEASE) is None

    async def test_held_chunks_are_listed_and_a_rescue_is_noted_once_per_holder_and_token(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        for seq in range(3):
            await stores.chunks.create(campaign_id, seq, recipients(seq, seq + 1), None, now)
        await stores.chunks.claim(campaign_id, 1, "frozen", None, now + LEASE)
        await stores.chunks.claim(campaign_id, 2, "a", None, now + LEASE)
        await stores.chunks.finish(campaign_id, 2, ChunkStatus.DONE, 1, 0, now, "a")
        pending = await stores.chunks.pending(campaign_id)
        assert [(c.seq, c.owner) for c in pending] == [(0, None), (1, "frozen")]
        held = pending[1]
        assert (held.seq, held.owner, held.fence) == (1, "frozen", 1)
        later = now + timedelta(seconds=5)
        assert await stores.chunks.mark_rescued(held, now, not_since=now - LEASE)
        assert not await stores.chunks.mark_rescued(held, now, not_since=now - LEASE)
        assert await stores.chunks.mark_rescued(held, later, not_since=later)  # offered again
        await stores.chunks.claim(campaign_id, 1, "taker", "frozen", now + LEASE, fence=1)
        assert not await stores.chunks.mark_rescued(held, later + LEASE, not_since=later + LEASE)

    async def test_chunks_closed_for_good_are_counted_and_all_are_read_in_order(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        closing = {3: ChunkStatus.DONE, 1: ChunkStatus.DEAD, 2: ChunkStatus.CANCELLED}
        for seq in (3, 0, 2, 1):
            await stores.chunks.create(campaign_id, seq, recipients(seq, seq + 1), None, now)
        await stores.chunks.create(new_id(), 0, recipients(0, 1), None, now)  # another campaign
        for seq, status in closing.items():
            await stores.chunks.claim(campaign_id, seq, "a", None, now + LEASE)
            await stores.chunks.finish(campaign_id, seq, status, 1, 0, now, "a")
        assert await stores.chunks.count_closed(campaign_id) == 2
        assert [c.seq async for c in stores.chunks.in_order(campaign_id)] == [0, 1, 2, 3]

    async def test_recorded_outcomes_merge_and_the_first_record_of_a_position_wins(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        await stores.deliveries.record(campaign_id, 0, "a", at([(0, None), (1, "UNAVAILABLE")]), now)
        await stores.deliveries.record(campaign_id, 0, "b", at([(1, None), (2, "UNREGISTERED")]), now)
        await stores.deliveries.record(campaign_id, 1, "b", at([(0, None)]), now)
        assert await stores.deliveries.recorded(campaign_id, 0) == {
            0: None, 1: "UNAVAILABLE", 2: "UNREGISTERED"}
        assert await stores.deliveries.recorded(campaign_id, 5) == {}

    async def test_deliveries_are_read_by_chunk_then_in_the_order_written(
            self, stores: Stores) -> None:
        campaign_id, now = new_id(), utcnow()
        for seq, pod_id in ((1, "first"), (0, "second"), (1, "third"), (0, "fourth")):
            await stores.deliveries.record(campaign_id, seq, pod_id, at([(0, None)]), now)
        read = [(d.seq, d.pod) async for d in stores.deliveries.in_order(campaign_id)]
        assert read == [(0, "second"), (0, "fourth"), (1, "first"), (1, "third")]


PEOPLE: list[dict[str, Any]] = [
    {"platform": "android", "topics": ["news"], "locale": "en",
     "attributes": {"tier": "gold", "age": 30, "vip": True}},
    {"platform": "ios", "marketing_enabled": True, "topics": ["news", "sport"], "locale": "ko",
     "attributes": {"tier": "silver", "age": 17}},
    {"platform": "web", "push_enabled": False, "locale": "en-US", "attributes": {"age": 45}},
    {"platform": "android", "marketing_enabled": True, "topics": ["sport"], "locale": "ko",
     "attributes": {"tier": "gold", "age": 17.5}},
    {"platform": "ios"},
    {"platform": "android", "attributes": {"age": "30", "tier": "GOLD"}},
]
"""Six devices for audience queries: ``device(i, **PEOPLE[i])``."""

AUDIENCES: list[tuple[Audience, list[int]]] = [
    (Audience(), [0, 1, 3, 4, 5]),
    (Audience(push_enabled=None), [0, 1, 2, 3, 4, 5]),
    (Audience(push_enabled=False), [2]),
    (Audience(platforms=[Platform.IOS]), [1, 4]),
    (Audience(topics=["sport"]), [1, 3]),
    (Audience(topics=["news", "sport"]), [0, 1, 3]),
    (Audience(marketing_enabled=True), [1, 3]),
    (Audience(user_ids=["u0", "u3", "u2"]), [0, 3]),
    (Audience(locales=["ko", "en-US"]), [1, 3]),
    (Audience(attributes={"tier": AttributeFilter(eq="gold")}), [0, 3]),
    (Audience(attributes={"tier": AttributeFilter.model_validate({"in": ["gold", "silver"]})}),
     [0, 1, 3]),
    (Audience(attributes={"age": AttributeFilter(gte=17, lt=30)}), [1, 3]),
    (Audience(attributes={"age": AttributeFilter(gt=17, lte=45)}, push_enabled=None), [0, 2, 3]),
    (Audience(platforms=[Platform.ANDROID], attributes={"tier": AttributeFilter(eq="gold")}),
     [0, 3]),
]
"""Audiences and the devices of ``PEOPLE`` each selects: a range never reaches across types
(``"30"`` is no number), and every condition narrows."""


class DeviceContract:
    async def people(self, stores: Stores) -> list[str]:
        """``PEOPLE`` registered; their ids, in registration (and paging) order."""
        await stores.devices.upsert([device(i, **p) for i, p in enumerate(PEOPLE)], utcnow())
        return [device_id async for device_id, _ in stores.devices.stream(EVERYONE, None, None)]

    @pytest.mark.parametrize(("audience", "selected"), AUDIENCES)
    async def test_an_audience_streams_exactly_its_devices_in_id_order(
            self, stores: Stores, audience: Audience, selected: list[int]) -> None:
        await self.people(stores)
        streamed = [r.token async for _, r in stores.devices.stream(audience, None,
                                                                    None)]
        assert streamed == [f"tok-{i:05d}" for i in selected]

    async def test_a_boolean_attribute_is_not_the_number_one(self, stores: Stores) -> None:
        await stores.devices.upsert([device(0, attributes={"vip": True}),
                                     device(1, attributes={"vip": 1})], utcnow())
        for value, token in ((True, "tok-00000"), (1, "tok-00001")):
            vip = Audience(attributes={"vip": AttributeFilter(eq=value)})
            assert [r.token async for _, r in stores.devices.stream(vip, None, None)] == [token]

    async def test_a_stream_runs_after_its_cursor_up_to_its_bound(self, stores: Stores) -> None:
        ids = await self.people(stores)
        streamed = [(i, r.token) async for i, r in stores.devices.stream(EVERYONE, ids[1], ids[4])]
        assert streamed == [(ids[i], f"tok-{i:05d}") for i in (2, 3, 4)]

    async def test_a_retired_token_leaves_every_audience(self, stores: Stores) -> None:
        await self.people(stores)
        now = utcnow()
        retired = await stores.devices.mark_invalid(["tok-00001", "tok-00003", "nobody"],
                                                    "UNREGISTERED", now)
        again = await stores.devices.mark_invalid(["tok-00001"], "UNREGISTERED", now)
        streamed = [r.token async for _, r in stores.devices.stream(
            EVERYONE, None, None)]
        dead = await stores.devices.find_by_token("tok-00001")
        assert (retired, again) == (2, 0)
        assert streamed == ["tok-00000", "tok-00002", "tok-00004", "tok-00005"]
        assert dead is not None and (dead.invalid, dead.invalid_reason) == (True, "UNREGISTERED")

    async def test_upserting_creates_new_tokens_and_updates_known_ones_last_entry_winning(
            self, stores: Stores) -> None:
        first = utcnow()
        await stores.devices.upsert([device(0), device(1)], first)
        later = first + timedelta(seconds=1)
        counts = await stores.devices.upsert(
            [device(1, platform="ios"), device(2), device(1, platform="web")], later)
        updated = await stores.devices.find_by_token("tok-00001")
        assert (counts.created, counts.updated) == (1, 1)
        assert updated is not None
        assert (updated.platform, updated.created_at, updated.updated_at) == ("web", first, later)
        assert await stores.devices.find_by_token("tok-09999") is None

    async def test_local_time_waves_select_their_zones_and_the_zones_nobody_planned(
            self, stores: Stores) -> None:
        zones = ["Asia/Seoul", "Europe/Madrid", None, "America/Lima", "Asia/Tokyo", None]
        await stores.devices.upsert([device(i, timezone=zone, push_enabled=i != 5)
                                     for i, zone in enumerate(zones)], utcnow())
        listed = ("Asia/Seoul", "Asia/Tokyo", "Europe/Madrid")
        with_others = Zones(("Asia/Seoul", "Asia/Tokyo"), others=True, listed=listed)
        madrid = Zones(("Europe/Madrid",), listed=listed)
        first = [(i, r.token) async for i, r in stores.devices.stream(Audience(), None, None,
                                                                      zones=with_others)]
        resumed = [r.token async for _, r in stores.devices.stream(
            Audience(), first[1][0], None, zones=with_others)]
        second = [r.token async for _, r in stores.devices.stream(Audience(), None, None,
                                                                  zones=madrid)]
        assert [token for _, token in first] == ["tok-00000", "tok-00002", "tok-00003",
                                                 "tok-00004"]
        assert resumed == ["tok-00003", "tok-00004"]
        assert second == ["tok-00001"]

    async def test_timezones_are_those_of_the_devices_selected(self, stores: Stores) -> None:
        zones = ["Asia/Seoul", "Europe/Madrid", None, "Asia/Seoul", "Asia/Tokyo"]
        await stores.devices.upsert([device(i, timezone=zone, push_enabled=i != 4)
                                     for i, zone in enumerate(zones)], utcnow())
        found = await stores.devices.timezones(Audience())
        assert sorted(found) == ["Asia/Seoul", "Europe/Madrid"]

    async def test_devices_are_counted_by_timezone(self, stores: Stores) -> None:
        zones = ["Asia/Seoul", "Europe/Madrid", None, "Asia/Seoul", "Asia/Tokyo", None]
        await stores.devices.upsert([device(i, timezone=zone, push_enabled=i != 4)
                                     for i, zone in enumerate(zones)], utcnow())
        assert await stores.devices.by_timezone(Audience()) == {
            "Asia/Seoul": 2, "Europe/Madrid": 1, None: 2}

    @pytest.mark.parametrize(("audience", "selected"), AUDIENCES)
    async def test_an_audience_counts_exactly_the_devices_it_streams(
            self, stores: Stores, audience: Audience, selected: list[int]) -> None:
        await self.people(stores)
        assert await stores.devices.count(audience) == len(selected)

    async def test_nobody_counts_zero(self, stores: Stores) -> None:
        nobody = Audience(user_ids=["nobody"])
        assert await stores.devices.count(nobody) == 0
        await self.people(stores)
        assert await stores.devices.count(nobody) == 0

    async def test_a_retired_token_is_not_counted(self, stores: Stores) -> None:
        await self.people(stores)
        everyone = EVERYONE
        before = await stores.devices.count(everyone)
        await stores.devices.mark_invalid(["tok-00001"], "UNREGISTERED", utcnow())
        assert await stores.devices.count(everyone) == before - 1

    async def test_the_newest_device_is_the_last_registered(self, stores: Stores) -> None:
        assert await stores.devices.newest_id() is None
        ids = await self.people(stores)
        assert await stores.devices.newest_id() == ids[-1]

    async def test_a_users_device_found_is_the_newest_whose_token_is_not_retired(
            self, stores: Stores) -> None:
        await stores.devices.upsert([device(i, user_id="ann") for i in range(3)], utcnow())
        newest = await stores.devices.find_by_user_id("ann")
        assert newest is not None and newest.token == "tok-00002"
        await stores.devices.mark_invalid(["tok-00002"], "UNREGISTERED", utcnow())
        usable = await stores.devices.find_by_user_id("ann")
        assert usable is not None and usable.token == "tok-00001"
        await stores.devices.mark_invalid(["tok-00000", "tok-00001"], "UNREGISTERED", utcnow())
        assert await stores.devices.find_by_user_id("ann") is None


class ScheduleContract:
    async def test_a_due_occurrence_is_claimed_by_one_replica_until_its_lease_ends(
            self, stores: Stores) -> None:
        due = schedule()
        await stores.schedules.insert(due)
        occurrence, now = due.next_run_at, utcnow()
        assert occurrence is not None
        claims = await asyncio.gather(*(stores.schedules.claim(
            due.id, occurrence, f"pod-{i}", now, now + LEASE) for i in range(4)))
        assert sum(c is not None for c in claims) == 1
        assert await stores.schedules.claim(due.id, occurrence + timedelta(days=1), "late",
                                            now + 2 * LEASE, now + 3 * LEASE) is None
        late = await stores.schedules.claim(due.id, occurrence, "late", now + 2 * LEASE,
                                            now + 3 * LEASE)
        assert late is not None and late.claim is not None and late.claim.by == "late"

    async def test_claiming_one_schedule_never_claims_another(self, stores: Stores) -> None:
        """A replica that died holding a schedule leaves an expired claim there; claiming
        another schedule must not touch it (a filter's ``$or`` binds only its own branches)."""
        abandoned, wanted = schedule(), schedule(state=ScheduleState.PAUSED)
        for each in (abandoned, wanted):
            await stores.schedules.insert(each)
        assert abandoned.next_run_at is not None and wanted.next_run_at is not None
        now = utcnow()
        await stores.schedules.claim(abandoned.id, abandoned.next_run_at, "dead", now, now)
        later = now + timedelta(seconds=1)
        taken = await stores.schedules.claim(wanted.id, wanted.next_run_at, "me", later,
                                             later + LEASE)
        left = await stores.schedules.get(abandoned.id)
        assert taken is None  # paused
        assert left is not None and left.claim is not None and left.claim.by == "dead"

    async def test_advancing_records_the_runs_moves_on_and_lets_go(self, stores: Stores) -> None:
        history = tuple(ScheduleRunRecord(utcnow(), "fired", new_id(), None, utcnow())
                        for _ in range(19))
        due = schedule(runs=history, missed_total=3)
        await stores.schedules.insert(due)
        assert due.next_run_at is not None
        now = utcnow()
        claimed_now = await stores.schedules.claim(due.id, due.next_run_at, "me", now, now + LEASE)
        assert claimed_now is not None
        runs = [ScheduleRunRecord(due.next_run_at, "missed", None, "late", now),
                ScheduleRunRecord(due.next_run_at, "fired", new_id(), None, now)]
        following = due.next_run_at + timedelta(days=1)
        assert not await stores.schedules.advance(claimed_now, "other", following, runs, 2, now)
        assert await stores.schedules.advance(claimed_now, "me", following, runs, 2, now)
        assert not await stores.schedules.advance(claimed_now, "me", following, runs, 2, now)
        after = await stores.schedules.get(due.id)
        assert after is not None
        assert (after.next_run_at, after.claim, after.missed_total) == (following, None, 5)
        assert after.runs == (*history, *runs)[-20:]

    async def test_only_active_schedules_are_due(self, stores: Stores) -> None:
        now = utcnow()
        past = now - timedelta(minutes=1)
        active = schedule(next_run_at=past)
        paused = schedule(next_run_at=past - timedelta(minutes=1), state=ScheduleState.PAUSED)
        later = schedule(next_run_at=now + timedelta(hours=1))
        for each in (active, paused, later):
            await stores.schedules.insert(each)
        assert [s.id for s in await stores.schedules.due(now)] == [active.id]
        assert await stores.schedules.next_run_at() == past

    async def test_an_ended_schedule_is_changed_only_when_asked_to_be(
            self, stores: Stores) -> None:
        ended = schedule(state=ScheduleState.ENDED, next_run_at=None)
        await stores.schedules.insert(ended)
        assert await stores.schedules.update(ended.id, {"name": "x"}, unless_ended=True) is None
        renamed = await stores.schedules.update(ended.id, {"name": "x", "state": "paused"})
        assert renamed is not None and (renamed.name, renamed.state) == ("x",
                                                                         ScheduleState.PAUSED)

    async def test_schedules_are_paged_newest_first(self, stores: Stores) -> None:
        made = [schedule() for _ in range(3)]
        for each in made:
            await stores.schedules.insert(each)
        assert [s.id for s in await stores.schedules.page(None, 2)] == [made[2].id, made[1].id]
        assert [s.id for s in await stores.schedules.page(made[1].id, 5)] == [made[0].id]


class IdempotencyContract:
    async def test_the_first_binding_of_a_key_stands(self, stores: Stores) -> None:
        first = IdempotencyBinding("key", "print-1", new_id(), utcnow())
        assert await stores.idempotency.reserve(first) is None
        assert await stores.idempotency.reserve(replace(first, fingerprint="print-2",
                                                        campaign_id=new_id())) == first

    async def test_a_key_is_rebound_only_from_the_campaign_it_was_bound_to(
            self, stores: Stores) -> None:
        binding = IdempotencyBinding("key", "print", new_id(), utcnow())
        await stores.idempotency.reserve(binding)
        fresh = new_id()
        assert not await stores.idempotency.rebind("key", new_id(), fresh)
        assert await stores.idempotency.rebind("key", binding.campaign_id, fresh)
        assert await stores.idempotency.reserve(binding) == replace(binding, campaign_id=fresh)


class StoreContract(CampaignContract, ChunkContract, DeviceContract, ScheduleContract,
                    IdempotencyContract):
    """Every repository's contract; subclass it with a ``stores`` fixture."""

    # --- retention ---------------------------------------------------------------------------
    async def test_idempotency_keys_and_test_sends_expire_by_their_time(
            self, stores: Stores) -> None:
        """Issue 31: neither grows forever (``service_layer/retention.py`` runs this)."""
        old, new = utcnow() - timedelta(days=2), utcnow()
        for key, at_ in (("old", old), ("new", new)):
            await stores.idempotency.reserve(IdempotencyBinding(key, "f", new_id(), at_))
        assert await stores.idempotency.expire(utcnow() - timedelta(days=1)) == 1
        assert await stores.idempotency.reserve(IdempotencyBinding("old", "g", new_id(), new)
                                                ) is None, "free again"
        assert await stores.idempotency.reserve(IdempotencyBinding("new", "g", new_id(), new)
                                                ) is not None, "still bound"
        for at_ in (old, new):
            await stores.test_sends.insert(TestSend(id=new_id(), campaign_id="c", at=at_,
                                                    by=actor("ops"), status=Status.PENDING,
                                                    outcomes=()))
        assert await stores.test_sends.expire(utcnow() - timedelta(days=1)) == 1
        assert [r.at for r in await stores.test_sends.of_campaign("c")] == [new]

    # --- erasure (issue 33) -----------------------------------------------------------------
    async def test_a_person_is_erased_from_every_chunk_in_place(self, stores: Stores) -> None:
        """By token or by user id, in every campaign's chunks; the other recipients and every
        chunk's size stay, and the chunk counts what it lost."""
        first, second = new_id(), new_id()
        for campaign_id in (first, second):
            await stores.chunks.create(campaign_id, 0, recipients(0, 4), cursor=None,
                                       now=utcnow())
        person = ErasedPerson("u1", tokens=frozenset({"tok-00002"}))
        assert await stores.chunks.erase(person) == 4
        assert await stores.chunks.erase(person) == 0
        for campaign_id in (first, second):
            chunk = await stores.chunks.get(campaign_id, 0)
            assert chunk is not None and chunk.state.erased == 2
            assert [r.token for r in chunk.recipients] == ["tok-00000", "", "", "tok-00003"]
            assert [bool(r.erased) for r in chunk.recipients] == [False, True, True, False]
            assert chunk.recipients[1].user_id is None

    async def test_devices_leave_by_user_or_by_token(self, stores: Stores) -> None:
        await stores.devices.upsert([device(1, user_id="dana"), device(2, user_id="dana"),
                                     device(3)], utcnow())
        await stores.devices.mark_invalid(["tok-00002"], "UNREGISTERED", utcnow())
        assert sorted(d.token for d in await stores.devices.of_user("dana")) == [
            "tok-00001", "tok-00002"]
        assert await stores.devices.delete_of_user("dana") == 2
        assert await stores.devices.of_user("dana") == []
        assert await stores.devices.delete_by_token("tok-00003") is True
        assert await stores.devices.delete_by_token("tok-00003") is False
        assert await stores.devices.count(EVERYONE) == 0

    async def test_a_test_send_forgets_an_erased_device_and_keeps_the_answer(
            self, stores: Stores) -> None:
        theirs = TestOutcome(device_id="d1", token_suffix="00000001", user_id=None,
                             error="UNREGISTERED")
        other = TestOutcome(device_id="d2", token_suffix="00000002", user_id="u2")
        await stores.test_sends.insert(TestSend(id=new_id(), campaign_id="c", at=utcnow(),
                                                by=actor("ops"), status=Status.PENDING,
                                                outcomes=(theirs, other)))
        assert await stores.test_sends.erase(ErasedPerson("dana", device_ids=frozenset({"d1"}))
                                             ) == 1
        [record] = await stores.test_sends.of_campaign("c")
        assert record.outcomes == (TestOutcome(device_id="", token_suffix="", user_id=None,
                                               error="UNREGISTERED", erased=True), other)
