"""The device registry in MongoDB: upsert by token, stream an audience, retire dead tokens.

A device document is ``herald.domain.documents.Device`` as stored, its ``_id`` an ``ObjectId``:
``_id`` order is the order in which audiences are paged. An ``Audience`` (and a wave's ``Zones``)
becomes a MongoDB filter here only (``audience_filter``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import DESCENDING, UpdateOne
from pymongo.errors import BulkWriteError

from herald import names
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, object_id
from herald.contracts.http import DeviceIn
from herald.domain.audience import AttributeFilter, Audience, Zones
from herald.domain.device_import import DeviceFields, ImportCounts, plan_batch
from herald.domain.documents import Device, UpsertCounts
from herald.domain.messages import Profile, ProfileNeed, Recipient

DUPLICATE_KEY = 11000
UPDATE_BULK = 500
FEW_TOKENS = 32
PLAIN_FIELDS = {"token": 1, "user_id": 1}
PROFILE_FIELDS = {"token": 1, "user_id": 1, "platform": 1, "locale": 1, "timezone": 1,
                  "attributes": 1}
"""A per-device campaign's recipients carry their profile (``ProfileNeed`` keeps the
attributes it reads); nx-27017 projects whole fields, so ``attributes`` is read whole."""
IMPORTED_FIELDS = dict.fromkeys(DeviceIn.model_fields, 1)
"""What an import sets, read back to tell an unchanged device from an updated one."""
COUNT_SLICE = 200_000
"""Devices (of any audience) per count query in ``DeviceStore.count_between``: on nx-27017 a
slice holds its single thread for about 0.2 s (2026-11-28)."""
STREAM_PAGE = 2000
"""Devices per query when streaming an audience (``DeviceStore.stream``): on nx-27017 one page
holds its single thread for about 0.05 s (2026-11-28), however large the audience."""


def audience_filter(audience: Audience, zones: Zones | None = None) -> dict[str, Any]:
    """The MongoDB filter of the devices ``audience`` admits (``Audience.admits``), within
    ``zones`` if given. Every operator is built here from validated scalars."""
    query: dict[str, Any] = {"invalid": False}
    if audience.push_enabled is not None:
        query["push_enabled"] = audience.push_enabled
    if audience.marketing_enabled is not None:
        query["marketing_enabled"] = audience.marketing_enabled
    for field, values in audience.memberships().items():
        if values is not None:
            query[field] = {"$in": values}
    for name, condition in (audience.attributes or {}).items():
        query[f"attributes.{name}"] = _attribute_condition(condition)
    return query if zones is None else {"$and": [query, _zones_filter(zones)]}


def _attribute_condition(condition: AttributeFilter) -> Any:
    if condition.eq is not None:
        return condition.eq
    if condition.in_ is not None:
        return {"$in": list(condition.in_)}
    return {f"${op}": value for op, value in condition.bounds().items()}


def _zones_filter(zones: Zones) -> dict[str, Any]:
    own: dict[str, Any] = {"timezone": {"$in": list(zones.zones)}}
    if zones.others:  # no timezone, or one unknown when the waves were planned
        own = {"$or": [own, {"timezone": {"$nin": list(zones.listed)}}]}
    return own


def _within(query: dict[str, Any], after: str | None, until: str | None) -> dict[str, Any]:
    """``query`` narrowed to the devices with ``after < _id <= until``."""
    id_range: dict[str, ObjectId | None] = {}
    if after is not None:
        id_range["$gt"] = object_id(after)
    if until is not None:
        id_range["$lte"] = object_id(until)
    return {**query, "_id": id_range} if id_range else dict(query)


class DeviceStore:
    """Devices keyed by their token (unique); ``_id`` order is the paging order of audiences."""

    def __init__(self, db: Database) -> None:
        self._devices = db[names.DEVICES]

    async def upsert(self, devices: Sequence[DeviceIn], now: datetime) -> UpsertCounts:
        """Insert new tokens and update known ones; the last entry wins for a repeated token.

        New devices go in with one ``insert_many`` and known ones are updated without upserts:
        both are fast on MongoDB, and upserting bulk writes are two orders of magnitude slower on
        the nx-27017 development server.
        """
        by_token = {device.token: device.model_dump(mode="json") for device in devices}
        known = await self._ids_of(list(by_token))
        fresh = [self._new_document(fields, now) for token, fields in by_token.items()
                 if token not in known]
        raced = await self._insert_fresh(fresh)
        if raced:
            known |= await self._ids_of(list(raced))
        updates = {known[token]: fields for token, fields in by_token.items() if token in known}
        await self._update_by_id(updates, now)
        return UpsertCounts(created=len(fresh) - len(raced), updated=len(updates))

    async def import_batch(self, lines: Sequence[DeviceFields], now: datetime) -> ImportCounts:
        """Upsert by token, writing only what changes: each token's last line is inserted first
        (one unordered ``insert_many``); the tokens the registry already had (refused as
        duplicates) are read back in one lookup, compared, and the changed ones updated by
        ``_id``; unchanged devices are not written. What each line did is ``plan_batch``'s count.

        Insert first, because a lookup of a batch's tokens (``$in``) scans the whole collection
        on nx-27017, at every batch, however few of the tokens are known: an import of new
        devices, the usual case, then never reads. On MongoDB both orders cost an index probe
        per token.
        """
        last = {fields["token"]: fields for fields in lines}
        known = await self._insert_fresh([self._new_document(fields, now)
                                          for fields in last.values()])
        stored = await self._importable_of(list(known)) if known else {}
        gone = [last[token] for token in known if token not in stored]  # removed meanwhile
        await self._insert_fresh([self._new_document(fields, now) for fields in gone])
        plan = plan_batch(lines, stored)
        await self._update_by_id({stored[token]["_id"]: fields
                                  for token, fields in plan.updates.items()}, now)
        return plan.counts

    async def mark_invalid(self, tokens: Sequence[str], reason: str, now: datetime) -> int:
        """Retire tokens FCM rejected for good: no audience selects them again.

        Updates address devices by ``_id``, found through the token index first (see
        ``_update_by_id``).
        """
        ids = await self._ids_of(list(tokens))
        if not ids:
            return 0
        retire = {"$set": {"invalid": True, "invalid_reason": reason, "updated_at": now}}
        result = await self._devices.bulk_write(
            [UpdateOne({"_id": device_id, "invalid": False}, retire) for device_id in ids.values()],
            ordered=False)
        return result.modified_count

    async def stream(self, audience: Audience, after: str | None, until: str | None, *,
                     zones: Zones | None = None,
                     need: ProfileNeed | None = None) -> AsyncIterator[tuple[str, Recipient]]:
        """Devices of ``audience`` (in ``zones``) with ``after < id <= until``, in id order, a
        page of ``STREAM_PAGE`` per query: each device's id and the recipient it is, with the
        profile ``need`` asks for (None: token and user id only, as a plain campaign needs).

        A query per page, not one cursor: the first recipients come after one page whatever
        the audience's size (nx-27017 reads a query's every result before answering: one
        cursor over 700,000 devices held it for a minute), and nothing stays open while a
        campaign waits for room or is paused (MongoDB closes an idle cursor after 10 minutes).
        """
        query = audience_filter(audience, zones)
        projection = PLAIN_FIELDS if need is None else PROFILE_FIELDS
        position = after
        while True:
            page = [device async for device in self._devices.find(
                _within(query, position, until), projection).sort("_id", 1).limit(STREAM_PAGE)]
            for device in page:
                yield str(device["_id"]), Recipient.model_construct(
                    token=device["token"], user_id=device.get("user_id"),
                    profile=None if need is None else need.profile(device))
            if len(page) < STREAM_PAGE:
                return
            position = str(page[-1]["_id"])

    async def count_between(self, audience: Audience, after: str | None, until: str | None, *,
                            zones: Zones | None = None) -> int:
        """How many devices ``stream`` would give, counted by the database (``$match`` +
        ``$count``; nothing streams through Python), a slice of ``COUNT_SLICE`` ids per query.

        Slices, because nx-27017 serves nobody while it counts: one count of the 700,000
        devices a cancel left unpaged held it (and the api) for over a second at 1,000,000
        devices. A device that changes while the slices are counted is counted as it was when
        its slice was (the instant of a cancel's count is that of its slices, not one)."""
        query = audience_filter(audience, zones)
        counted, position = 0, after
        while True:
            bound = await self._slice_end(position, until)
            counted += await self._counted(_within(query, position, bound or until))
            if bound is None:
                return counted
            position = bound

    async def _slice_end(self, after: str | None, until: str | None) -> str | None:
        """The id ``COUNT_SLICE`` devices after ``after`` (within ``until``), read from the id
        index alone; None when fewer are left."""
        cursor = self._devices.find(_within({}, after, until), {"_id": 1}).sort("_id", 1)
        found = [device async for device in cursor.skip(COUNT_SLICE - 1).limit(1)]
        return str(found[0]["_id"]) if found else None

    async def profiles(self, tokens: Sequence[str], need: ProfileNeed) -> dict[str, Profile]:
        """The profiles of the devices with these tokens, by token; one query (``$in``)."""
        cursor = self._devices.find({"token": {"$in": list(tokens)}}, PROFILE_FIELDS)
        return {device["token"]: need.profile(device) async for device in cursor}

    async def locales(self, audience: Audience) -> dict[str | None, int]:
        """Devices of ``audience`` by locale: one ``$group`` over the same ``$match`` as
        ``count`` (strings as keys, which nx-27017 keeps as they are)."""
        cursor = await self._devices.aggregate([
            {"$match": audience_filter(audience)},
            {"$group": {"_id": "$locale", "devices": {"$sum": 1}}}])
        return {row["_id"]: int(row["devices"]) async for row in cursor}

    async def find_by_user_id(self, user_id: str) -> Device | None:
        return maybe(Device, await self._devices.find_one({"user_id": user_id, "invalid": False},
                                                          sort=[("_id", DESCENDING)]))

    async def by_timezone(self, audience: Audience) -> dict[str | None, int]:
        """Devices of ``audience`` by timezone: one ``$group`` over ``count``'s ``$match``."""
        cursor = await self._devices.aggregate([
            {"$match": audience_filter(audience)},
            {"$group": {"_id": "$timezone", "devices": {"$sum": 1}}}])
        return {row["_id"]: int(row["devices"]) async for row in cursor}

    async def timezones(self, audience: Audience) -> list[str]:
        """The distinct device timezones among the devices of ``audience``."""
        zones = await self._devices.distinct("timezone", audience_filter(audience))
        return [zone for zone in zones if isinstance(zone, str)]

    async def count(self, audience: Audience) -> int:
        """How many devices ``audience`` admits.

        A ``$match`` then ``$count`` pipeline: exact on both servers, and on nx-27017 about 17
        times faster than ``count_documents`` (whose ``$group`` stage it runs in Python: 3.0 s
        against 0.18 s at 20,000 devices, while its single thread serves nobody else).
        """
        return await self._counted(audience_filter(audience))

    async def _counted(self, query: dict[str, Any]) -> int:
        cursor = await self._devices.aggregate([{"$match": query}, {"$count": "devices"}])
        found = [row async for row in cursor]
        return int(found[0]["devices"]) if found else 0

    async def newest_id(self) -> str | None:
        newest = await self._devices.find_one({}, {"_id": 1}, sort=[("_id", DESCENDING)])
        return str(newest["_id"]) if newest else None

    async def find_by_token(self, token: str) -> Device | None:
        return maybe(Device, await self._devices.find_one({"token": token}))

    async def of_user(self, user_id: str) -> list[Device]:
        """Every device registered with ``user_id``, retired ones too (the ``user_id`` index)."""
        return [from_bson(Device, document)
                async for document in self._devices.find({"user_id": user_id})]

    async def delete_of_user(self, user_id: str) -> int:
        """Remove every device registered with ``user_id``; how many there were."""
        return (await self._devices.delete_many({"user_id": user_id})).deleted_count

    async def delete_by_token(self, token: str) -> bool:
        """Remove the device of ``token``; False if there was none."""
        return (await self._devices.delete_one({"token": token})).deleted_count == 1

    async def _ids_of(self, tokens: list[str]) -> dict[str, ObjectId]:
        """``_id`` of each known token, through the unique token index.

        A handful of tokens are looked up one by one, concurrently; many, with one ``$in``.
        Both are index lookups on MongoDB; on nx-27017 only the equality is, and ``$in`` costs
        a collection scan (about 70 ms at 50,000 devices) whatever the number of tokens.
        """
        if len(tokens) <= FEW_TOKENS:
            found = await asyncio.gather(*(self._devices.find_one({"token": t}, {"token": 1})
                                           for t in tokens))
            return {doc["token"]: doc["_id"] for doc in found if doc is not None}
        cursor = self._devices.find({"token": {"$in": tokens}}, {"token": 1})
        return {doc["token"]: doc["_id"] async for doc in cursor}

    async def _importable_of(self, tokens: list[str]) -> dict[str, Document]:
        """The stored devices of ``tokens``: their ``_id`` and the fields an import sets."""
        cursor = self._devices.find({"token": {"$in": tokens}}, IMPORTED_FIELDS)
        return {document["token"]: document async for document in cursor}

    async def _insert_fresh(self, documents: list[Document]) -> set[str]:
        """Insert new devices; return the tokens the registry already had (to update)."""
        if not documents:
            return set()
        try:
            await self._devices.insert_many(documents, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(error.get("code") != DUPLICATE_KEY for error in errors):
                raise
            return {documents[error["index"]]["token"] for error in errors}
        return set()

    async def _update_by_id(self, devices: Mapping[ObjectId, dict[str, Any]], now: datetime) -> None:
        """Update known devices, addressed by ``_id`` in bulks of ``UPDATE_BULK``.

        Addressing by ``_id`` costs MongoDB nothing extra (the token lookup already returned it)
        and is what keeps updates fast on nx-27017, whose updates on any other filter scan the
        collection in insertion order, and whose bulk writes slow down more than linearly.
        """
        ops = [UpdateOne({"_id": device_id}, {"$set": {**fields, "updated_at": now}})
               for device_id, fields in devices.items()]
        for start in range(0, len(ops), UPDATE_BULK):
            await self._devices.bulk_write(ops[start:start + UPDATE_BULK], ordered=False)

    @staticmethod
    def _new_document(fields: Mapping[str, Any], now: datetime) -> Document:
        return {**fields, "invalid": False, "created_at": now, "updated_at": now}
