"""Campaigns in MongoDB. Every status change is a conditional ``findOneAndUpdate``.

A campaign document is ``herald.domain.documents.Campaign`` as stored (``adapters.records``):
its content, audience or follow-up source, live counters, the dispatcher's lease and paging
checkpoint (``dispatch``), and, once asked, the cancel record. Live counts grow by whole chunks;
final counts are recomputed from the records when the campaign finishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, object_id, to_bson
from herald.clock import utcnow
from herald.domain.access import Actor
from herald.domain.documents import (
    Approval,
    Campaign,
    CampaignCounts,
    CancelRecord,
    Decision,
    DecisionKind,
    PauseRecord,
)
from herald.domain.lanes import Lane
from herald.domain.rollout import RolloutProgress
from herald.domain.status import TERMINAL, Status, Transition, sources_for, target_of
from herald.domain.timing import Wave

_EDITED = ("name", "content", "audience", "due_at", "local_time", "edited_by", "rate_per_s",
           "status", "approvals", "approval_required", "audience_estimate", "editors")
"""What an edit of a campaign that has not fired writes."""

_STILL_COUNTING = sorted(status.value for status in Status if status not in TERMINAL)
"""Statuses in which a finished chunk still adds to the live counts."""


def _latest(after: Decision | None) -> Document:
    """The condition that ``after`` is still the campaign's latest decision."""
    return {"decision": None} if after is None else {"decision.id": after.id}


def _counts(counts: CampaignCounts) -> Document:
    return {"counts.targeted": counts.targeted, "counts.sent": counts.sent,
            "counts.failed": counts.failed, "counts.maybe_delivered": counts.maybe_delivered,
            "counts.suppressed": counts.suppressed}


class CampaignStore:
    def __init__(self, db: Database) -> None:
        self._campaigns = db[names.CAMPAIGNS]

    async def insert(self, campaign: Campaign) -> None:
        document = to_bson(campaign)
        if document["run_key"] is None:
            # Only schedule runs have a key, and its unique index is sparse: a sparse index
            # still indexes an explicit null on MongoDB, so a second null would be a duplicate.
            del document["run_key"]
        await self._campaigns.insert_one(document)

    async def get(self, campaign_id: str) -> Campaign | None:
        oid = object_id(campaign_id)
        return None if oid is None else maybe(Campaign, await self._campaigns.find_one({"_id": oid}))

    async def page(self, statuses: Iterable[Status] | None, before: str | None,
                   limit: int) -> list[Campaign]:
        """Newest first, ``limit`` campaigns created before the campaign ``before``."""
        query: Document = {}
        if statuses:
            query["status"] = {"$in": [s.value for s in statuses]}
        if before is not None:
            query["_id"] = {"$lt": object_id(before)}
        return await self._find(query, sort=("_id", DESCENDING), limit=limit)

    async def with_status(self, status: Status, limit: int = 0) -> list[Campaign]:
        """Every campaign of ``status``, oldest first (``limit``: at most that many)."""
        return await self._find({"status": status.value}, sort=("_id", 1), limit=limit)

    async def transition(self, campaign_id: str, transition: Transition, now: datetime, *,
                         also_set: Mapping[str, Any] | None = None,
                         where: Mapping[str, Any] | None = None) -> Campaign | None:
        """Apply ``transition`` if the campaign's status allows it; the updated campaign, or None.

        The status test and the write are one atomic operation, so of two racing transitions
        exactly one wins, whatever the order in which they read the campaign.
        """
        oid = object_id(campaign_id)
        if oid is None:
            return None
        query = {"_id": oid, "status": {"$in": [s.value for s in sources_for(transition)]},
                 **(where or {})}
        update = {"$set": {"status": target_of(transition).value, "updated_at": now,
                           **(also_set or {})}}
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            query, update, return_document=ReturnDocument.AFTER))

    # --- named transitions, each with what it records --------------------------------------------
    async def fire(self, campaign_id: str, now: datetime, fired_by: str, *,
                   due_at: datetime) -> Campaign | None:
        """Fire the campaign if it is still scheduled at the ``due_at`` the scheduler read (a
        ``PATCH`` that moved it since wins; the next round reads its new time)."""
        return await self.transition(campaign_id, Transition.FIRE, now,
                                     also_set={"fired_at": now, "fired_by": fired_by},
                                     where={"due_at": due_at})

    async def miss(self, campaign_id: str, reason: str, now: datetime, *,
                   due_at: datetime) -> Campaign | None:
        """Mark the campaign missed if it is still scheduled at the ``due_at`` read."""
        return await self.transition(campaign_id, Transition.MISS, now,
                                     also_set={"error": reason, "finished_at": now},
                                     where={"due_at": due_at})

    async def finish(self, campaign_id: str, transition: Transition, counts: CampaignCounts,
                     error: str | None, now: datetime) -> Campaign | None:
        """``complete`` or ``fail`` with the final counts."""
        return await self.transition(campaign_id, transition, now, also_set={
            **_counts(counts), "finished_at": now, "error": error})

    async def begin_cancel(self, campaign_id: str, record: CancelRecord, decision: Decision,
                           *, after: Decision | None, status: Status) -> Campaign | None:
        if status not in sources_for(Transition.BEGIN_CANCEL):
            return None
        return await self.transition(
            campaign_id, Transition.BEGIN_CANCEL, record.requested_at,
            also_set={"cancel": asdict(record), "decision": asdict(decision)},
            where={**_latest(after), "status": status.value})

    async def confirm_cancel(self, campaign_id: str, counts: CampaignCounts, now: datetime,
                             error: str | None = None) -> Campaign | None:
        """``cancelling → cancelled`` with final counts; ``→ failed`` with ``error`` for a
        campaign Herald stopped itself (``CancelRecord.fails_with``)."""
        transition = Transition.CONFIRM_CANCEL if error is None else Transition.CONFIRM_STOP
        return await self.transition(campaign_id, transition, now, also_set={
            **_counts(counts), "cancel.acknowledged_at": now, "finished_at": now,
            **({"error": error} if error is not None else {})})

    async def recount(self, campaign_id: str, counts: CampaignCounts) -> bool:
        """Final counts of a finished campaign computed again (answers recorded late)."""
        result = await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "status": {"$in": sorted(s.value for s in TERMINAL)}},
            {"$set": _counts(counts)})
        return result.modified_count == 1

    # --- creation and edits ----------------------------------------------------------------------
    async def insert_run(self, campaign: Campaign) -> Campaign:
        """Insert a schedule's run; if its ``run_key`` exists already, the earlier run stands."""
        try:
            await self.insert(campaign)
        except DuplicateKeyError:
            earlier = await self._campaigns.find_one({"run_key": campaign.run_key})
            assert earlier is not None
            return from_bson(Campaign, earlier)
        return campaign

    async def find_run(self, run_key: str) -> Campaign | None:
        """A schedule's run, by its unique key; None if no replica created it yet."""
        return maybe(Campaign, await self._campaigns.find_one({"run_key": run_key}))

    async def due_scheduled(self, now: datetime, limit: int = 100) -> list[Campaign]:
        return await self._find({"status": Status.SCHEDULED.value, "due_at": {"$lte": now}},
                                sort=("due_at", 1), limit=limit)

    async def next_scheduled_due(self) -> datetime | None:
        earliest = await self._campaigns.find_one(
            {"status": Status.SCHEDULED.value}, {"due_at": 1}, sort=[("due_at", 1)])
        return earliest["due_at"] if earliest else None

    async def patch_scheduled(self, edited: Campaign, now: datetime,
                              was: Status = Status.SCHEDULED) -> Campaign | None:
        """Write the edited name, content, audience, timing, status and approvals of a campaign
        only while it is still ``was`` at the revision the edit read; the result, or None."""
        document = to_bson(edited)
        changes = {key: document[key] for key in _EDITED}
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(edited.id), "status": was.value, "revision": edited.revision},
            {"$set": {**changes, "updated_at": now}, "$inc": {"revision": 1}},
            return_document=ReturnDocument.AFTER))

    async def approve(self, campaign: Campaign, transition: Transition,
                      approvals: Sequence[Approval], now: datetime) -> Campaign | None:
        """``transition`` with ``approvals`` recorded, only at the revision that was read; its
        editors since the last approval start afresh."""
        return await self.transition(
            campaign.id, transition, now, where={"revision": campaign.revision},
            also_set={"approvals": [asdict(approval) for approval in approvals], "editors": []})

    async def hold_for_approval(self, campaign_id: str, audience_estimate: int, now: datetime,
                                *, due_at: datetime) -> Campaign | None:
        """``scheduled → awaiting_approval`` with its audience as counted now, only while it
        is still due at ``due_at`` (as the scheduler read it)."""
        return await self.transition(
            campaign_id, Transition.HOLD_FOR_APPROVAL, now, where={"due_at": due_at},
            also_set={"approval_required": True, "audience_estimate": audience_estimate})

    async def set_rate(self, campaign_id: str, rate_per_s: int | None, by: Actor, now: datetime,
                       *, among: Iterable[Status],
                       approvals: Sequence[Approval] | None = None) -> Campaign | None:
        """Change the campaign's own rate while its status is one of ``among`` (and, given,
        record ``approvals``: a rate above the approved one is a new approval)."""
        changes: Document = {"rate_per_s": rate_per_s, "edited_by": asdict(by), "updated_at": now}
        if approvals is not None:
            changes["approvals"] = [asdict(approval) for approval in approvals]
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "status": {"$in": sorted(s.value for s in among)}},
            {"$set": changes}, return_document=ReturnDocument.AFTER))

    # --- dispatch: claims, leases, checkpoints ---------------------------------------------------
    async def claim_for_dispatch(self, campaign_id: str | None, pod_id: str, now: datetime,
                                 lease_until: datetime) -> Campaign | None:
        """Take a pending campaign, or one whose dispatcher's lease ran out, for paging: that
        one, or any (an urgent one first, then the oldest)."""
        if campaign_id is not None:
            target = object_id(campaign_id)
            return None if target is None else await self._claim({"_id": target}, pod_id, now,
                                                                 lease_until)
        urgent = await self._claim({"lane": Lane.URGENT.value}, pod_id, now, lease_until)
        return urgent or await self._claim({}, pod_id, now, lease_until)

    async def _claim(self, target: Document, pod_id: str, now: datetime,
                     lease_until: datetime) -> Campaign | None:
        lease = {"dispatch.owner": pod_id, "dispatch.lease_until": lease_until}
        fresh = await self._campaigns.find_one_and_update(
            {**target, "status": {"$in": [s.value for s in sources_for(Transition.CLAIM)]},
             "due_at": {"$lte": now}},
            {"$set": {"status": target_of(Transition.CLAIM).value, "started_at": now,
                      "updated_at": now, **lease}},
            sort=[("_id", 1)], return_document=ReturnDocument.AFTER)
        if fresh is not None:
            return from_bson(Campaign, fresh)
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {**target, "status": Status.IN_PROGRESS.value, "dispatch.done": False,
             "dispatch.lease_until": {"$lt": now}},
            {"$set": {"updated_at": now, **lease}, "$inc": {"dispatch.takeovers": 1}},
            sort=[("_id", 1)], return_document=ReturnDocument.AFTER))

    async def renew_lease(self, campaign_id: str, pod_id: str, lease_until: datetime) -> bool:
        result = await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "status": Status.IN_PROGRESS.value,
             "dispatch.owner": pod_id, "dispatch.done": False},
            {"$set": {"dispatch.lease_until": lease_until}})
        return result.modified_count == 1

    async def paging(self, limit: int = 0) -> list[Campaign]:
        """Campaigns whose dispatcher is (or should be) paging them."""
        return await self._find({"status": Status.IN_PROGRESS.value, "dispatch.done": False},
                                limit=limit)

    async def take_over(self, campaign_id: str, dead_owner: str, pod_id: str,
                        lease_until: datetime) -> Campaign | None:
        """Take a campaign from a dispatcher whose heartbeat stopped, before its lease expires."""
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "status": Status.IN_PROGRESS.value,
             "dispatch.done": False, "dispatch.owner": dead_owner},
            {"$set": {"dispatch.owner": pod_id, "dispatch.lease_until": lease_until},
             "$inc": {"dispatch.takeovers": 1}},
            return_document=ReturnDocument.AFTER))

    async def paged_and_open(self, limit: int = 0) -> list[Campaign]:
        """Campaigns fully paged but not finished: where a lost chunk count would show."""
        return await self._find({"status": Status.IN_PROGRESS.value, "dispatch.done": True},
                                limit=limit)

    async def stuck_finalizing(self, older_than: datetime, limit: int = 0) -> list[Campaign]:
        """Campaigns left ``finalizing`` by a pod that died while writing the final counts."""
        return await self._find({"status": Status.FINALIZING.value,
                                 "updated_at": {"$lt": older_than}}, limit=limit)

    async def fix_dispatch_bound(self, campaign_id: str, pod_id: str, until: str | None,
                                 waves: Sequence[Wave] | None = None) -> Campaign | None:
        """Record the newest device the campaign may reach (and its local-time waves), once,
        before the first chunk."""
        bound: Document = {"dispatch.until": until}
        if waves is not None:
            bound["dispatch.waves"] = [asdict(wave) for wave in waves]
        oid = object_id(campaign_id)
        await self._campaigns.update_one(
            {"_id": oid, "dispatch.owner": pod_id, "dispatch.until": None}, {"$set": bound})
        return maybe(Campaign, await self._campaigns.find_one({"_id": oid}))

    async def checkpoint(self, campaign_id: str, pod_id: str, seq: int, size: int,
                         lease_until: datetime) -> bool:
        """Count chunk ``seq`` as published and extend the lease; False if the lease was lost."""
        result = await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "dispatch.owner": pod_id, "dispatch.next_seq": seq},
            {"$set": {"dispatch.next_seq": seq + 1, "dispatch.lease_until": lease_until},
             "$inc": {"counts.targeted": size, "progress.chunks_published": 1}})
        return result.modified_count == 1

    async def finish_dispatch(self, campaign_id: str, pod_id: str,
                              now: datetime) -> Campaign | None:
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "dispatch.owner": pod_id, "dispatch.done": False},
            {"$set": {"dispatch.done": True, "dispatch.lease_until": now, "updated_at": now}},
            return_document=ReturnDocument.AFTER))

    async def release_dispatch(self, campaign_id: str, pod_id: str, until: datetime) -> None:
        """Let the lease end at ``until``: now on a graceful stop (another dispatcher resumes),
        or when the next wave of a local-time campaign is due."""
        await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "dispatch.owner": pod_id},
            {"$set": {"dispatch.lease_until": until}})

    # --- counting chunks -------------------------------------------------------------------------
    async def count_finished_chunk(self, campaign_id: str, sent: int, failed: int,
                                   *, done: bool, suppressed: int = 0) -> Campaign | None:
        """Add a finished chunk's outcomes to the live counts (and to the chunks done, if it
        was not cut short by a cancel). Each chunk finishes once, so the counts never drift;
        a campaign already finished keeps the exact counts it was finished with (None)."""
        increments = {"counts.sent": sent, "counts.failed": failed,
                      "counts.suppressed": suppressed,
                      "progress.chunks_done": 1 if done else 0}
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "status": {"$in": _STILL_COUNTING}},
            {"$inc": increments}, return_document=ReturnDocument.AFTER))

    async def mark_first_request(self, campaign_id: str, at: datetime) -> bool:
        result = await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "first_request_at": None},
            {"$set": {"first_request_at": at}})
        return result.modified_count == 1

    # --- the stopping protocol -------------------------------------------------------------------
    async def claim_cancel_finalization(self, campaign_id: str, pod_id: str, now: datetime,
                                        until: datetime) -> bool:
        """One pod computes a cancelled campaign's final counts; a dead one's claim expires."""
        result = await self._campaigns.update_one(
            {"$and": [  # not a sibling $or: nx-27017 drops the other conditions next to one
                {"_id": object_id(campaign_id), "status": Status.CANCELLING.value},
                {"$or": [{"cancel.finalizer": None}, {"cancel.finalizer_until": {"$lt": now}}]}]},
            {"$set": {"cancel.finalizer": pod_id, "cancel.finalizer_until": until}})
        return result.modified_count == 1

    async def add_ack(self, campaign_id: str, decision: Decision, pod_id: str) -> None:
        record = "pause" if decision.kind is DecisionKind.PAUSE else "cancel"
        await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "decision.id": decision.id},
            {"$addToSet": {f"{record}.acks": pod_id}})

    async def begin_pause(self, campaign_id: str, record: PauseRecord, decision: Decision,
                          *, after: Decision | None) -> Campaign | None:
        """``in_progress → paused`` with the pause record; None if the campaign was not sending
        (or another decision came first)."""
        return await self.transition(
            campaign_id, Transition.PAUSE, record.requested_at,
            also_set={"pause": asdict(record), "decision": asdict(decision)},
            where=_latest(after))

    async def settle_pause(self, campaign_id: str, pause_id: str, counts: CampaignCounts,
                           now: datetime) -> Campaign | None:
        """Pause ``pause_id`` settled: every pod stopped; the counts so far, exact."""
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "status": Status.PAUSED.value,
             "pause.pause_id": pause_id, "pause.settled_at": None},
            {"$set": {"pause.counts": asdict(counts), "pause.settled_at": now, "updated_at": now}},
            return_document=ReturnDocument.AFTER))

    async def resume(self, campaign_id: str, by: Actor | None, decision: Decision,
                     *, after: Decision | None) -> Campaign | None:
        """``paused → in_progress``; None if the campaign was not paused (or another decision
        came first)."""
        return await self.transition(campaign_id, Transition.RESUME, decision.at, also_set={
            "pause.resumed_at": decision.at, "pause.resume_id": decision.id,
            "pause.offered_at": None, "pause.resumed_by": None if by is None else asdict(by),
            "decision": asdict(decision)}, where=_latest(after))

    async def mark_offered(self, campaign_id: str, resume_id: str, now: datetime) -> bool:
        result = await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "pause.resume_id": resume_id,
             "pause.offered_at": None}, {"$set": {"pause.offered_at": now}})
        return result.modified_count == 1

    async def resumed_unoffered(self) -> list[Campaign]:
        return await self._find({"status": Status.IN_PROGRESS.value,
                                 "decision.kind": DecisionKind.RESUME.value,
                                 "pause.offered_at": None})

    async def with_rollout(self) -> list[Campaign]:
        return await self._find({"status": Status.IN_PROGRESS.value,
                                 "rollout_progress": {"$ne": None}})

    async def update_rollout(self, campaign_id: str, wave: int, progress: RolloutProgress
                             ) -> Campaign | None:
        """A staged rollout's progress, while the campaign sends and its wave is still
        ``wave`` (of two pods moving it, one does)."""
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "status": Status.IN_PROGRESS.value,
             "rollout_progress.wave": wave},
            {"$set": {"rollout_progress": asdict(progress), "updated_at": utcnow()}},
            return_document=ReturnDocument.AFTER))

    # --- follow-ups ------------------------------------------------------------------------------
    async def follow_ups_of(self, campaign_id: str) -> list[Campaign]:
        """Every retarget, amend and retry made of ``campaign_id``, oldest first."""
        return await self._find({"follow_up.campaign_id": campaign_id}, sort=("_id", 1))

    async def link_amendment(self, campaign_id: str, amend_id: str) -> None:
        """List ``amend_id`` among the amends of ``campaign_id``, once, after the earlier ones.

        Every campaign is inserted with an empty ``amended_by``, because nx-27017's
        ``$addToSet`` on a missing field does nothing; one stored before that field existed
        gets its array first."""
        oid = object_id(campaign_id)
        await self._campaigns.update_one({"_id": oid, "amended_by": {"$exists": False}},
                                         {"$set": {"amended_by": []}})
        await self._campaigns.update_one({"_id": oid}, {"$addToSet": {"amended_by": amend_id}})

    async def _find(self, query: Document, *, sort: tuple[str, int] | None = None,
                    limit: int = 0) -> list[Campaign]:
        cursor = self._campaigns.find(query)
        if sort is not None:
            cursor = cursor.sort(*sort)
        return [from_bson(Campaign, document) async for document in cursor.limit(limit)]
