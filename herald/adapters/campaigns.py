"""Campaign documents in MongoDB. Every status change is a conditional ``findOneAndUpdate``.

A campaign document carries its content, its audience, its live counters, the dispatcher's lease
and cursor checkpoint, and, once asked, the cancel record:

    {_id, name, title, body, image_url, data, audience | retarget, chunk_size, rate_per_s,
     status, counts: {targeted, sent, failed}, progress: {chunks_published, chunks_done},
     (live counts grow by whole chunks; final counts are recomputed from the records)
     dispatch: {owner, lease_until, until, next_seq, done},
     cancel: {requested_at, reason, requested_by, expected_pods, acks, acknowledged_at} | null,
     created_at, due_at, started_at, finished_at, updated_at, schedule_id, source}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from bson import ObjectId
from bson.errors import InvalidId
from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document
from herald.domain.status import TERMINAL, Status, Transition, sources_for, target_of

_STILL_COUNTING = sorted(status.value for status in Status if status not in TERMINAL)
"""Statuses in which a finished chunk still adds to the live counts."""


def object_id(campaign_id: str | ObjectId) -> ObjectId | None:
    """The ObjectId behind an id from a URL or a message, or ``None`` when it is not one."""
    if isinstance(campaign_id, ObjectId):
        return campaign_id
    try:
        return ObjectId(campaign_id)
    except (InvalidId, TypeError):
        return None


class CampaignStore:
    def __init__(self, db: Database) -> None:
        self._campaigns = db[names.CAMPAIGNS]

    async def insert(self, document: Document) -> None:
        await self._campaigns.insert_one(document)

    async def get(self, campaign_id: str | ObjectId) -> Document | None:
        oid = object_id(campaign_id)
        return None if oid is None else await self._campaigns.find_one({"_id": oid})

    async def page(self, statuses: Iterable[Status] | None, before: ObjectId | None,
                   limit: int) -> list[Document]:
        """Newest first, ``limit`` campaigns created before the campaign ``before``."""
        query: dict[str, Any] = {}
        if statuses:
            query["status"] = {"$in": [s.value for s in statuses]}
        if before is not None:
            query["_id"] = {"$lt": before}
        cursor = self._campaigns.find(query).sort("_id", DESCENDING).limit(limit)
        return await cursor.to_list()

    async def with_status(self, status: Status, limit: int = 100) -> list[Document]:
        cursor = self._campaigns.find({"status": status.value}).sort("_id", 1).limit(limit)
        return await cursor.to_list()

    async def transition(self, campaign_id: str | ObjectId, transition: Transition, now: datetime,
                         *, also_set: Mapping[str, Any] | None = None,
                         where: Mapping[str, Any] | None = None) -> Document | None:
        """Apply ``transition`` if the campaign's status allows it; the updated document, or None.

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
        return await self._campaigns.find_one_and_update(
            query, update, return_document=ReturnDocument.AFTER)

    async def insert_run(self, document: Document) -> Document:
        """Insert a schedule's run; if its ``run_key`` exists already, the earlier run stands."""
        try:
            await self._campaigns.insert_one(document)
        except DuplicateKeyError:
            earlier = await self._campaigns.find_one({"run_key": document["run_key"]})
            assert earlier is not None
            return earlier
        return document

    async def due_scheduled(self, now: datetime, limit: int = 100) -> list[Document]:
        cursor = self._campaigns.find({"status": Status.SCHEDULED.value, "due_at": {"$lte": now}})
        return await cursor.sort("due_at", 1).limit(limit).to_list()

    async def next_scheduled_due(self) -> datetime | None:
        earliest = await self._campaigns.find_one(
            {"status": Status.SCHEDULED.value}, {"due_at": 1}, sort=[("due_at", 1)])
        return earliest["due_at"] if earliest else None

    async def patch_scheduled(self, campaign_id: str, changes: Mapping[str, Any],
                              now: datetime) -> Document | None:
        """Change a campaign only while it is still ``scheduled``; the result, or None."""
        oid = object_id(campaign_id)
        if oid is None:
            return None
        return await self._campaigns.find_one_and_update(
            {"_id": oid, "status": Status.SCHEDULED.value},
            {"$set": {**changes, "updated_at": now}}, return_document=ReturnDocument.AFTER)

    async def claim_for_dispatch(self, campaign_id: str | None, pod_id: str, now: datetime,
                                 lease_until: datetime) -> Document | None:
        """Take a pending campaign, or one whose dispatcher's lease ran out, for paging."""
        lease = {"dispatch.owner": pod_id, "dispatch.lease_until": lease_until}
        target: dict[str, Any] = {} if campaign_id is None else {"_id": object_id(campaign_id)}
        if campaign_id is not None and target["_id"] is None:
            return None
        fresh = await self._campaigns.find_one_and_update(
            {**target, "status": {"$in": [s.value for s in sources_for(Transition.CLAIM)]},
             "due_at": {"$lte": now}},
            {"$set": {"status": target_of(Transition.CLAIM).value, "started_at": now,
                      "updated_at": now, **lease}},
            sort=[("_id", 1)], return_document=ReturnDocument.AFTER)
        if fresh is not None:
            return fresh
        return await self._campaigns.find_one_and_update(
            {**target, "status": Status.IN_PROGRESS.value, "dispatch.done": False,
             "dispatch.lease_until": {"$lt": now}},
            {"$set": {"updated_at": now, **lease}, "$inc": {"dispatch.takeovers": 1}},
            sort=[("_id", 1)], return_document=ReturnDocument.AFTER)

    async def renew_lease(self, campaign_id: ObjectId, pod_id: str, lease_until: datetime) -> bool:
        result = await self._campaigns.update_one(
            {"_id": campaign_id, "status": Status.IN_PROGRESS.value, "dispatch.owner": pod_id,
             "dispatch.done": False},
            {"$set": {"dispatch.lease_until": lease_until}})
        return result.modified_count == 1

    async def paging(self, limit: int = 100) -> list[Document]:
        """Campaigns whose dispatcher is (or should be) paging them."""
        cursor = self._campaigns.find(
            {"status": Status.IN_PROGRESS.value, "dispatch.done": False},
            {"dispatch": 1, "status": 1}).limit(limit)
        return await cursor.to_list()

    async def take_over(self, campaign_id: ObjectId, dead_owner: str, pod_id: str,
                        lease_until: datetime) -> Document | None:
        """Take a campaign from a dispatcher whose heartbeat stopped, before its lease expires."""
        return await self._campaigns.find_one_and_update(
            {"_id": campaign_id, "status": Status.IN_PROGRESS.value, "dispatch.done": False,
             "dispatch.owner": dead_owner},
            {"$set": {"dispatch.owner": pod_id, "dispatch.lease_until": lease_until},
             "$inc": {"dispatch.takeovers": 1}},
            return_document=ReturnDocument.AFTER)

    async def paged_and_open(self, limit: int = 100) -> list[Document]:
        """Campaigns fully paged but not finished: where a lost chunk count would show."""
        cursor = self._campaigns.find(
            {"status": Status.IN_PROGRESS.value, "dispatch.done": True},
            {"progress": 1, "dispatch": 1}).limit(limit)
        return await cursor.to_list()

    async def stuck_finalizing(self, older_than: datetime, limit: int = 100) -> list[Document]:
        """Campaigns left ``finalizing`` by a pod that died while writing the final counts."""
        cursor = self._campaigns.find({"status": Status.FINALIZING.value,
                                       "updated_at": {"$lt": older_than}}).limit(limit)
        return await cursor.to_list()

    async def fix_dispatch_bound(self, campaign_id: ObjectId, pod_id: str, until: Any,
                                 waves: list[dict[str, Any]] | None = None) -> Document | None:
        """Record the last device ``_id`` the campaign may reach (and its local-time waves),
        once, before the first chunk."""
        bound: dict[str, Any] = {"dispatch.until": until}
        if waves is not None:
            bound["dispatch.waves"] = waves
        await self._campaigns.update_one(
            {"_id": campaign_id, "dispatch.owner": pod_id, "dispatch.until": None},
            {"$set": bound})
        return await self._campaigns.find_one({"_id": campaign_id})

    async def checkpoint(self, campaign_id: ObjectId, pod_id: str, seq: int, size: int,
                         lease_until: datetime) -> bool:
        """Count chunk ``seq`` as published and extend the lease; False if the lease was lost."""
        result = await self._campaigns.update_one(
            {"_id": campaign_id, "dispatch.owner": pod_id, "dispatch.next_seq": seq},
            {"$set": {"dispatch.next_seq": seq + 1, "dispatch.lease_until": lease_until},
             "$inc": {"counts.targeted": size, "progress.chunks_published": 1}})
        return result.modified_count == 1

    async def finish_dispatch(self, campaign_id: ObjectId, pod_id: str,
                              now: datetime) -> Document | None:
        return await self._campaigns.find_one_and_update(
            {"_id": campaign_id, "dispatch.owner": pod_id, "dispatch.done": False},
            {"$set": {"dispatch.done": True, "dispatch.lease_until": now, "updated_at": now}},
            return_document=ReturnDocument.AFTER)

    async def release_dispatch(self, campaign_id: ObjectId, pod_id: str, now: datetime) -> None:
        """Let the lease end at ``now``: at once on a graceful stop (another dispatcher resumes),
        or when the next wave of a local-time campaign is due."""
        await self._campaigns.update_one(
            {"_id": campaign_id, "dispatch.owner": pod_id},
            {"$set": {"dispatch.lease_until": now}})

    async def count_finished_chunk(self, campaign_id: str, sent: int, failed: int,
                                   *, done: bool) -> Document | None:
        """Add a finished chunk's outcomes to the live counts (and to the chunks done, if it
        was not cut short by a cancel). Each chunk finishes once, so the counts never drift;
        a campaign already finished keeps the exact counts it was finished with (None)."""
        increments = {"counts.sent": sent, "counts.failed": failed,
                      "progress.chunks_done": 1 if done else 0}
        return await self._campaigns.find_one_and_update(
            {"_id": ObjectId(campaign_id), "status": {"$in": _STILL_COUNTING}},
            {"$inc": increments},
            return_document=ReturnDocument.AFTER)

    async def count_frozen_chunk(self, campaign_id: ObjectId, seq: int, size: int) -> bool:
        """Count chunk ``seq`` of a cancelling campaign as targeted (written, never published)."""
        result = await self._campaigns.update_one(
            {"_id": campaign_id, "status": Status.CANCELLING.value, "dispatch.next_seq": seq},
            {"$set": {"dispatch.next_seq": seq + 1}, "$inc": {"counts.targeted": size}})
        return result.modified_count == 1

    async def close_paging(self, campaign_id: ObjectId) -> Document | None:
        """A cancelled campaign's recipients are all frozen in chunks: nothing is left to page."""
        return await self._campaigns.find_one_and_update(
            {"_id": campaign_id, "status": Status.CANCELLING.value},
            {"$set": {"dispatch.done": True}}, return_document=ReturnDocument.AFTER)

    async def claim_cancel_finalization(self, campaign_id: str, pod_id: str, now: datetime,
                                        until: datetime) -> bool:
        """One pod computes a cancelled campaign's final counts; a dead one's claim expires."""
        result = await self._campaigns.update_one(
            {"_id": ObjectId(campaign_id), "status": Status.CANCELLING.value,
             "$or": [{"cancel.finalizer": None}, {"cancel.finalizer_until": {"$lt": now}}]},
            {"$set": {"cancel.finalizer": pod_id, "cancel.finalizer_until": until}})
        return result.modified_count == 1

    async def add_cancel_ack(self, campaign_id: str, pod_id: str) -> None:
        await self._campaigns.update_one(
            {"_id": ObjectId(campaign_id), "status": Status.CANCELLING.value},
            {"$addToSet": {"cancel.acks": pod_id}})
