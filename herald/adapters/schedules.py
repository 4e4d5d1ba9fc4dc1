"""Recurring schedules in MongoDB. A scheduler replica claims a due occurrence with a lease,
creates its run, then advances the schedule; a replica that dies mid-way leaves a lease that
expires, and the run's unique key makes the retry create nothing twice.

    {_id, name, template, cron, timezone, state: active | paused | ended, misfire_grace_s,
     next_run_at, claim: {by, until} | null, runs: [last RECENT_RUNS runs], missed_total,
     created_at, updated_at}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import DESCENDING, ReturnDocument

from herald import names
from herald.adapters.campaigns import object_id
from herald.adapters.mongo import Database, Document

RECENT_RUNS = 20


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self._schedules = db[names.SCHEDULES]

    async def insert(self, document: Document) -> None:
        await self._schedules.insert_one(document)

    async def get(self, schedule_id: str) -> Document | None:
        oid = object_id(schedule_id)
        return None if oid is None else await self._schedules.find_one({"_id": oid})

    async def page(self, before: ObjectId | None, limit: int) -> list[Document]:
        query = {"_id": {"$lt": before}} if before is not None else {}
        return await self._schedules.find(query).sort("_id", DESCENDING).limit(limit).to_list()

    async def update(self, schedule_id: str, changes: Mapping[str, Any],
                     where: Mapping[str, Any] | None = None) -> Document | None:
        """Apply ``changes`` if the schedule matches ``where``; the updated schedule, or None."""
        oid = object_id(schedule_id)
        if oid is None:
            return None
        return await self._schedules.find_one_and_update(
            {"_id": oid, **(where or {})}, {"$set": dict(changes)},
            return_document=ReturnDocument.AFTER)

    async def due(self, now: datetime, limit: int = 100) -> list[Document]:
        cursor = self._schedules.find({"state": "active", "next_run_at": {"$lte": now}})
        return await cursor.sort("next_run_at", 1).limit(limit).to_list()

    async def next_run_at(self) -> datetime | None:
        earliest = await self._schedules.find_one(
            {"state": "active", "next_run_at": {"$ne": None}}, {"next_run_at": 1},
            sort=[("next_run_at", 1)])
        return earliest["next_run_at"] if earliest else None

    async def claim(self, schedule_id: ObjectId, occurrence: datetime, pod_id: str,
                    now: datetime, lease_until: datetime) -> Document | None:
        """Take the due occurrence for this replica; None if another replica holds it."""
        return await self._schedules.find_one_and_update(
            {"_id": schedule_id, "state": "active", "next_run_at": occurrence,
             "$or": [{"claim": None}, {"claim.until": {"$lt": now}}]},
            {"$set": {"claim": {"by": pod_id, "until": lease_until}}},
            return_document=ReturnDocument.AFTER)

    async def advance(self, claimed: Document, pod_id: str, next_run_at: datetime | None,
                      runs: Sequence[Mapping[str, Any]], missed: int, now: datetime) -> bool:
        """Record the claimed occurrence's runs, move to the next one and release the claim.

        The run history is rewritten whole from the claimed document (the claim makes that
        safe) rather than ``$push``-ed: nx-27017 stores pushed objects as JSON strings.
        """
        history = [*(claimed.get("runs") or []), *runs][-RECENT_RUNS:]
        result = await self._schedules.update_one(
            {"_id": claimed["_id"], "claim.by": pod_id, "next_run_at": claimed["next_run_at"]},
            {"$set": {"next_run_at": next_run_at, "claim": None, "updated_at": now,
                      "runs": history},
             "$inc": {"missed_total": missed}})
        return result.modified_count == 1
