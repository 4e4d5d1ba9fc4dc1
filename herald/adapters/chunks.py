"""Chunks (the frozen recipient lists a dispatcher published) and deliveries (what FCM answered).

A chunk document is written before its message is published and never changes its recipients:

    {_id: "<campaign>:<seq>", campaign_id, seq, recipients: [{token, user_id}], size, cursor,
     status: pending | done | cancelled | dead, attempts, owner, owner_until, sent, failed,
     created_at, finished_at}

A sender claims a chunk (``owner``) for the time it sends it, so two copies of one chunk
message (a dispatcher that died between publishing and checkpointing) are never sent at once.

A delivery document is written after each FCM batch of a chunk, and only ever inserted, so
recording an outcome is one cheap write and a crash can at worst lose the batch in flight. It
names recipients by their position in the chunk's (immutable) recipient list, which keeps the
hot path's writes about fifty times smaller than copying tokens:

    {campaign_id, seq, pod, at, sent: [position], failed: [{position, error}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document


class ChunkStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"  # every recipient sent or failed
    CANCELLED = "cancelled"  # cut short by a cancel; the rest stays unsent
    DEAD = "dead"  # dead-lettered; the unrecorded rest counts as failed


def chunk_id(campaign_id: str, seq: int) -> str:
    return f"{campaign_id}:{seq:08d}"


class ChunkStore:
    def __init__(self, db: Database) -> None:
        self._chunks = db[names.CHUNKS]

    async def create(self, campaign_id: str, seq: int, recipients: list[dict[str, Any]],
                     cursor: Any, now: datetime,
                     status: ChunkStatus = ChunkStatus.PENDING) -> Document:
        """Write chunk ``seq``; if a previous owner already wrote it, that one stands."""
        document = {"_id": chunk_id(campaign_id, seq), "campaign_id": campaign_id, "seq": seq,
                    "recipients": recipients, "size": len(recipients), "cursor": cursor,
                    "status": status.value, "attempts": 0, "owner": None,
                    "owner_until": None, "sent": 0, "failed": 0, "created_at": now,
                    "finished_at": None}
        try:
            await self._chunks.insert_one(document)
        except DuplicateKeyError:
            existing = await self.get(campaign_id, seq)
            assert existing is not None
            return existing
        return document

    async def get(self, campaign_id: str, seq: int) -> Document | None:
        return await self._chunks.find_one({"_id": chunk_id(campaign_id, seq)})

    async def state(self, campaign_id: str, seq: int) -> Document | None:
        """The chunk without its recipients: status, attempts and who holds it."""
        return await self._chunks.find_one({"_id": chunk_id(campaign_id, seq)}, {"recipients": 0})

    async def claim(self, campaign_id: str, seq: int, pod_id: str, holder: str | None,
                    until: datetime) -> Document | None:
        """Take a pending chunk from ``holder`` (None: free), counting one more attempt.

        Its state before this attempt, or None if it was no longer pending or someone else
        took it meanwhile.
        """
        return await self._chunks.find_one_and_update(
            {"_id": chunk_id(campaign_id, seq), "status": ChunkStatus.PENDING.value,
             "owner": holder},
            {"$set": {"owner": pod_id, "owner_until": until}, "$inc": {"attempts": 1}},
            projection={"recipients": 0}, return_document=ReturnDocument.BEFORE)

    async def release(self, campaign_id: str, seq: int, pod_id: str, *, refund: bool) -> None:
        """Give the chunk back; ``refund`` takes back the attempt (an outage, a hand-over)."""
        update: dict[str, Any] = {"$set": {"owner": None}}
        if refund:
            update["$inc"] = {"attempts": -1}
        await self._chunks.update_one({"_id": chunk_id(campaign_id, seq), "owner": pod_id}, update)

    async def finish(self, campaign_id: str, seq: int, status: ChunkStatus, sent: int,
                     failed: int, now: datetime, owner: str) -> bool:
        """Close a pending chunk this ``owner`` holds; True only for the one that closed it."""
        result = await self._chunks.update_one(
            {"_id": chunk_id(campaign_id, seq), "status": ChunkStatus.PENDING.value,
             "owner": owner},
            {"$set": {"status": status.value, "sent": sent, "failed": failed,
                      "finished_at": now, "owner": None}})
        return result.modified_count == 1

    def in_order(self, campaign_id: str) -> AsyncCursor[Document]:
        return self._chunks.find({"campaign_id": campaign_id}).sort("seq", 1)

    async def count_done(self, campaign_id: str) -> int:
        """Chunks closed for good (sent, or dead-lettered), read from the chunks themselves."""
        cursor = self._chunks.find({"campaign_id": campaign_id}, {"status": 1})
        closed = (ChunkStatus.DONE.value, ChunkStatus.DEAD.value)
        return sum([1 async for chunk in cursor if chunk["status"] in closed])


Recorded = dict[int, str | None]
"""Position in the chunk → FCM error, ``None`` meaning sent."""


def recorded_in(delivery: Document, into: Recorded) -> Recorded:
    """Add a delivery document's outcomes to ``into``; the first record of a position wins."""
    for position in delivery["sent"]:
        into.setdefault(position, None)
    for failure in delivery["failed"]:
        into.setdefault(failure["position"], failure["error"])
    return into


class DeliveryStore:
    def __init__(self, db: Database) -> None:
        self._deliveries = db[names.DELIVERIES]

    async def record(self, campaign_id: str, seq: int, pod_id: str,
                     outcomes: Sequence[tuple[int, str | None]], now: datetime) -> None:
        """Record FCM's answers for recipients of chunk ``seq``, by position: (position, error)."""
        await self._deliveries.insert_one({
            "campaign_id": campaign_id, "seq": seq, "pod": pod_id, "at": now,
            "sent": [position for position, error in outcomes if error is None],
            "failed": [{"position": position, "error": error}
                       for position, error in outcomes if error is not None]})

    async def recorded(self, campaign_id: str, seq: int) -> Recorded:
        """Everything recorded for chunk ``seq`` so far."""
        recorded: Recorded = {}
        async for delivery in self._deliveries.find({"campaign_id": campaign_id, "seq": seq}):
            recorded_in(delivery, recorded)
        return recorded

    def in_order(self, campaign_id: str) -> AsyncCursor[Document]:
        return (self._deliveries.find({"campaign_id": campaign_id})
                .sort([("seq", 1), ("_id", 1)]).batch_size(1000))
