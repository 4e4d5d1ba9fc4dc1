"""Finished campaigns' archival in MongoDB (``service_layer/archiving.py``): which are due, the
claim of one api replica on one (``archiving: {owner, until}`` on the campaign document, taken
with a conditional ``findOneAndUpdate`` as a dispatcher takes a campaign to page it), the
archive's record, and the deletion of the campaign's chunks and deliveries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime

from pymongo import ReturnDocument

from herald import names
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, object_id
from herald.domain.archive import ArchiveRecord, VariantCounts
from herald.domain.documents import Campaign
from herald.domain.erasure import ErasedPerson
from herald.domain.status import TERMINAL

_FINISHED = sorted(status.value for status in TERMINAL)
_NULL = {"$in": [None]}
"""Null or missing, as ``{field: None}`` means on MongoDB; on nx-27017 ``{field: None}`` beside
an ``$in`` misses explicit nulls (docs/mongodb-stand-in.md), ``$in: [None]`` does not."""


_ARCHIVED: Document = {"archive.sha256": {"$gt": ""}}


def _due(ended_before: datetime) -> Document:
    return {"status": {"$in": _FINISHED}, "archive": _NULL, "$or": [
        {"finished_at": {"$lte": ended_before}},
        {"finished_at": _NULL, "updated_at": {"$lte": ended_before}}]}


def _unclaimed(now: datetime) -> Document:
    return {"$or": [{"archiving": _NULL}, {"archiving.until": {"$lt": now}}]}


class ArchivalStore:
    def __init__(self, db: Database) -> None:
        self._erasures = db[names.ARCHIVE_ERASURES]
        self._campaigns = db[names.CAMPAIGNS]
        self._chunks = db[names.CHUNKS]
        self._deliveries = db[names.DELIVERIES]

    async def due(self, ended_before: datetime, now: datetime, limit: int) -> list[Campaign]:
        """Finished before ``ended_before`` (or, stored without a finish, last changed then),
        and claimed by nobody at ``now``: a campaign another replica archives, or whose archive
        was refused (its claim is kept until the lease ends), does not hold up the next."""
        query = {"$and": [_due(ended_before), _unclaimed(now)]}
        cursor = self._campaigns.find(query).sort("_id", 1).limit(limit)
        return [from_bson(Campaign, document) async for document in cursor]

    async def count_due(self, ended_before: datetime) -> int:
        return await self._campaigns.count_documents(_due(ended_before))

    async def claim(self, campaign_id: str, pod_id: str, now: datetime,
                    until: datetime) -> Campaign | None:
        query: Document = {"_id": object_id(campaign_id), "status": {"$in": _FINISHED},
                           "archive": _NULL, **_unclaimed(now)}
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            query, {"$set": {"archiving": {"owner": pod_id, "until": until}}},
            return_document=ReturnDocument.AFTER))

    async def release(self, campaign_id: str, pod_id: str) -> None:
        await self._campaigns.update_one(
            {"_id": object_id(campaign_id), "archiving.owner": pod_id}, {"$set": {"archiving": None}})

    async def mark_archived(self, campaign_id: str, pod_id: str, record: ArchiveRecord,
                            variants: dict[str, VariantCounts]) -> Campaign | None:
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "archive": _NULL, "archiving.owner": pod_id},
            {"$set": {"archive": asdict(record), "archiving": None,
                      "variants": {tag: asdict(counts) for tag, counts in variants.items()}}},
            return_document=ReturnDocument.AFTER))

    async def unpurged(self, limit: int) -> list[Campaign]:
        cursor = self._campaigns.find({**_ARCHIVED, "archive.purged_at": _NULL})
        return [from_bson(Campaign, document) async for document in cursor.limit(limit)]

    async def purge(self, campaign_id: str) -> tuple[int, int]:
        chunks = await self._chunks.delete_many({"campaign_id": campaign_id})
        deliveries = await self._deliveries.delete_many({"campaign_id": campaign_id})
        return chunks.deleted_count, deliveries.deleted_count

    async def mark_purged(self, campaign_id: str, now: datetime) -> None:
        await self._campaigns.update_one({"_id": object_id(campaign_id)},
                                         {"$set": {"archive.purged_at": now}})

    # --- people erased after an archive was written ----------------------------------------------
    async def queue(self, person: ErasedPerson, now: datetime) -> bool:
        if await self._campaigns.find_one(_ARCHIVED, projection={"_id": 1}) is None:
            return False
        await self._erasures.insert_one({"user_id": person.user_id,
                                         "tokens": sorted(person.tokens), "at": now})
        return True

    async def waiting(self, limit: int) -> list[tuple[str, ErasedPerson]]:
        cursor = self._erasures.find({}).sort("_id", 1).limit(limit)
        return [(str(entry["_id"]), ErasedPerson(entry["user_id"], frozenset(entry["tokens"])))
                async for entry in cursor]

    async def done(self, entry_ids: Sequence[str]) -> None:
        await self._erasures.delete_many({"_id": {"$in": [object_id(i) for i in entry_ids]}})

    async def archived(self, after_id: str | None, limit: int) -> list[Campaign]:
        query = _ARCHIVED if after_id is None else {**_ARCHIVED, "_id": {"$gt": object_id(after_id)}}
        cursor = self._campaigns.find(query).sort("_id", 1).limit(limit)
        return [from_bson(Campaign, document) async for document in cursor]

    async def claim_archived(self, campaign_id: str, pod_id: str, now: datetime,
                             until: datetime) -> Campaign | None:
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), **_ARCHIVED, **_unclaimed(now)},
            {"$set": {"archiving": {"owner": pod_id, "until": until}}},
            return_document=ReturnDocument.AFTER))

    async def mark_rewritten(self, campaign_id: str, pod_id: str, record: ArchiveRecord,
                             variants: dict[str, VariantCounts]) -> Campaign | None:
        return maybe(Campaign, await self._campaigns.find_one_and_update(
            {"_id": object_id(campaign_id), "archiving.owner": pod_id},
            {"$set": {"archive": asdict(record), "archiving": None,
                      "variants": {tag: asdict(counts) for tag, counts in variants.items()}}},
            return_document=ReturnDocument.AFTER))
