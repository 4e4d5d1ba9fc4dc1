"""Recurring schedules in MongoDB. A scheduler replica claims a due occurrence with a lease,
creates its run, then advances the schedule; a replica that dies mid-way leaves a lease that
expires, and the run's unique key makes the retry create nothing twice.

A schedule document is ``herald.domain.documents.Schedule`` as stored; ``runs`` keeps the last
``RECENT_RUNS`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pymongo import DESCENDING, ReturnDocument

from herald import names
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, object_id, to_bson
from herald.domain.documents import Schedule, ScheduleRunRecord, ScheduleState

RECENT_RUNS = 20


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self._schedules = db[names.SCHEDULES]

    async def insert(self, schedule: Schedule) -> None:
        await self._schedules.insert_one(to_bson(schedule))

    async def get(self, schedule_id: str) -> Schedule | None:
        oid = object_id(schedule_id)
        return None if oid is None else maybe(Schedule, await self._schedules.find_one({"_id": oid}))

    async def page(self, before: str | None, limit: int) -> list[Schedule]:
        query = {"_id": {"$lt": object_id(before)}} if before is not None else {}
        cursor = self._schedules.find(query).sort("_id", DESCENDING).limit(limit)
        return [from_bson(Schedule, document) async for document in cursor]

    async def update(self, schedule_id: str, changes: Mapping[str, Any],
                     unless_ended: bool = False) -> Schedule | None:
        """Apply ``changes`` (field → value) to the schedule, if it has not ended when
        ``unless_ended``; the updated schedule, or None."""
        oid = object_id(schedule_id)
        if oid is None:
            return None
        query: Document = {"_id": oid}
        if unless_ended:
            query["state"] = {"$ne": ScheduleState.ENDED.value}
        return maybe(Schedule, await self._schedules.find_one_and_update(
            query, {"$set": dict(changes)}, return_document=ReturnDocument.AFTER))

    async def due(self, now: datetime, limit: int = 100) -> list[Schedule]:
        cursor = self._schedules.find({"state": ScheduleState.ACTIVE.value,
                                       "next_run_at": {"$lte": now}})
        return [from_bson(Schedule, document)
                async for document in cursor.sort("next_run_at", 1).limit(limit)]

    async def next_run_at(self) -> datetime | None:
        earliest = await self._schedules.find_one(
            {"state": ScheduleState.ACTIVE.value, "next_run_at": {"$ne": None}},
            {"next_run_at": 1}, sort=[("next_run_at", 1)])
        return earliest["next_run_at"] if earliest else None

    async def claim(self, schedule_id: str, occurrence: datetime, pod_id: str,
                    now: datetime, lease_until: datetime) -> Schedule | None:
        """Take the due occurrence for this replica; None if another replica holds it."""
        return maybe(Schedule, await self._schedules.find_one_and_update(
            {"$and": [  # not a sibling $or: nx-27017 drops the other conditions next to one
                {"_id": object_id(schedule_id), "state": ScheduleState.ACTIVE.value,
                 "next_run_at": occurrence},
                {"$or": [{"claim": None}, {"claim.until": {"$lt": now}}]}]},
            {"$set": {"claim": {"by": pod_id, "until": lease_until}}},
            return_document=ReturnDocument.AFTER))

    async def advance(self, claimed: Schedule, pod_id: str, next_run_at: datetime | None,
                      runs: Sequence[ScheduleRunRecord], missed: int, now: datetime) -> bool:
        """Record the claimed occurrence's runs, move to the next one and release the claim.

        The run history is rewritten whole from the claimed schedule (the claim makes that
        safe) rather than ``$push``-ed: nx-27017 stores pushed objects as JSON strings.
        """
        history = [asdict(run) for run in (*claimed.runs, *runs)][-RECENT_RUNS:]
        result = await self._schedules.update_one(
            {"_id": object_id(claimed.id), "claim.by": pod_id,
             "next_run_at": claimed.next_run_at},
            {"$set": {"next_run_at": next_run_at, "claim": None, "updated_at": now,
                      "runs": history},
             "$inc": {"missed_total": missed}})
        return result.modified_count == 1
