"""Chunks (the frozen recipient lists a dispatcher published) and deliveries (what FCM answered).

A chunk document is ``ChunkState`` plus its recipients (as ``chunk_codec`` stores them), with
``_id`` ``"<campaign>:<seq>"``; it is written before its message is published and never changes
its recipients (but for an erased person's: placeholders take their places). A sender claims
a chunk (``owner``) for the time it sends it, so two copies of one chunk message (a dispatcher
that died between publishing and checkpointing) are never sent at once.

A delivery document is written after each FCM batch of a chunk, and only ever inserted, so
recording an outcome is one cheap write and a crash can at worst lose the batch in flight. It
names recipients by their position in the chunk's (immutable) recipient list, which keeps the
hot path's writes about fifty times smaller than copying tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters import chunk_codec
from herald.adapters.chunk_codec import WITHOUT_RECIPIENTS
from herald.adapters.erasing import erase_where
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, to_bson
from herald.domain.documents import (
    CHUNK_CLOSED_FOR_GOOD,
    Chunk,
    ChunkState,
    ChunkStatus,
    Cursor,
    Delivery,
    Failure,
    Recorded,
    Suppression,
)
from herald.domain.erasure import ErasedPerson
from herald.domain.messages import Recipient
from herald.domain.outcomes import RecipientOutcome
from herald.domain.suppression import Rule

ERASED_RECIPIENT = chunk_codec.ERASED_RECIPIENT


def chunk_id(campaign_id: str, seq: int) -> str:
    return f"{campaign_id}:{seq:08d}"


def _chunk(document: Document) -> Chunk:
    return Chunk(from_bson(ChunkState, document), chunk_codec.decode(document))


class ChunkStore:
    def __init__(self, db: Database) -> None:
        self._chunks = db[names.CHUNKS]

    async def create(self, campaign_id: str, seq: int, recipients: Sequence[Recipient],
                     cursor: Cursor, now: datetime,
                     status: ChunkStatus = ChunkStatus.PENDING) -> Chunk:
        """Write chunk ``seq``; if a previous owner already wrote it, that one stands."""
        state = ChunkState(campaign_id=campaign_id, seq=seq, size=len(recipients), cursor=cursor,
                           status=status, created_at=now)
        document = {"_id": chunk_id(campaign_id, seq), **to_bson(state),
                    **chunk_codec.encode(recipients)}
        try:
            await self._chunks.insert_one(document)
        except DuplicateKeyError:
            existing = await self.get(campaign_id, seq)
            assert existing is not None
            return existing
        return Chunk(state, tuple(recipients))

    async def get(self, campaign_id: str, seq: int) -> Chunk | None:
        document = await self._chunks.find_one({"_id": chunk_id(campaign_id, seq)})
        return None if document is None else _chunk(document)

    async def state(self, campaign_id: str, seq: int) -> ChunkState | None:
        """The chunk without its recipients: status, attempts and who holds it."""
        return maybe(ChunkState, await self._chunks.find_one(
            {"_id": chunk_id(campaign_id, seq)}, WITHOUT_RECIPIENTS))

    async def claim(self, campaign_id: str, seq: int, pod_id: str, holder: str | None,
                    until: datetime, fence: int = 0) -> ChunkState | None:
        """Take a pending chunk from ``holder`` (None: free) whose fencing token is still
        ``fence`` (0: not checked), counting one more attempt and a new token.

        Its state before this attempt, or None if it was no longer pending or someone else
        took (or renewed) it meanwhile.
        """
        query: Document = {"_id": chunk_id(campaign_id, seq),
                           "status": ChunkStatus.PENDING.value, "owner": holder}
        if fence:
            query["fence"] = fence
        return maybe(ChunkState, await self._chunks.find_one_and_update(
            query, {"$set": {"owner": pod_id, "owner_until": until},
                    "$inc": {"attempts": 1, "fence": 1}},
            projection=WITHOUT_RECIPIENTS, return_document=ReturnDocument.BEFORE))

    async def renew(self, campaign_id: str, seq: int, pod_id: str, fence: int,
                    until: datetime) -> int | None:
        """Keep holding a pending chunk this pod claimed with token ``fence``: its new token,
        or None if it was taken over (or closed) meanwhile."""
        after = await self._chunks.find_one_and_update(
            {"_id": chunk_id(campaign_id, seq), "status": ChunkStatus.PENDING.value,
             "owner": pod_id, "fence": fence},
            {"$set": {"owner_until": until}, "$inc": {"fence": 1}},
            projection={"fence": 1}, return_document=ReturnDocument.AFTER)
        return None if after is None else int(after["fence"])

    async def release(self, campaign_id: str, seq: int, pod_id: str, *, refund: bool) -> None:
        """Give the chunk back; ``refund`` takes back the attempt (an outage, a hand-over)."""
        update: Document = {"$set": {"owner": None}}
        if refund:
            update["$inc"] = {"attempts": -1}
        await self._chunks.update_one({"_id": chunk_id(campaign_id, seq), "owner": pod_id}, update)

    async def finish(self, campaign_id: str, seq: int, status: ChunkStatus, sent: int,
                     failed: int, now: datetime, owner: str | None,
                     suppressed: int = 0) -> bool:
        """Close a pending chunk this ``owner`` holds; True only for the one that closed it."""
        result = await self._chunks.update_one(
            {"_id": chunk_id(campaign_id, seq), "status": ChunkStatus.PENDING.value,
             "owner": owner},
            {"$set": {"status": status.value, "sent": sent, "failed": failed,
                      "suppressed": suppressed, "finished_at": now, "owner": None}})
        return result.modified_count == 1

    async def pending(self, campaign_id: str) -> list[ChunkState]:
        """The campaign's chunks not closed yet, held by a pod or not."""
        cursor = self._chunks.find({"campaign_id": campaign_id,
                                    "status": ChunkStatus.PENDING.value},
                                   WITHOUT_RECIPIENTS).sort("seq", 1)
        return [from_bson(ChunkState, d) async for d in cursor]

    async def pending_everywhere(self) -> list[ChunkState]:
        """Every chunk not closed yet, of every campaign (the rescue's one read per sweep)."""
        cursor = self._chunks.find({"status": ChunkStatus.PENDING.value},
                                   WITHOUT_RECIPIENTS)
        return [from_bson(ChunkState, d) async for d in cursor]

    async def mark_wave_sent(self, campaign_id: str, seq: int, wave: int) -> None:
        """Every recipient of the chunk in waves up to ``wave`` has an outcome."""
        await self._chunks.update_one({"_id": chunk_id(campaign_id, seq)},
                                      {"$set": {"wave_sent": wave}})

    async def wait_for_next_wave(self, campaign_id: str, seq: int, pod_id: str,
                                 wave: int) -> bool:
        """Give back a pending chunk ``pod_id`` holds with ``wave_sent`` = ``wave`` and no
        attempts counted (one write): its later waves' recipients wait for their wave."""
        result = await self._chunks.update_one(
            {"_id": chunk_id(campaign_id, seq), "status": ChunkStatus.PENDING.value,
             "owner": pod_id},
            {"$set": {"owner": None, "wave_sent": wave, "attempts": 0}})
        return result.modified_count == 1

    async def mark_rescued(self, held: ChunkState, now: datetime, not_since: datetime) -> bool:
        """Note that the sweep offers ``held`` to the live senders: True once per holder and
        token, and again only after ``not_since`` (the copy may have been lost)."""
        result = await self._chunks.update_one(
            {"$and": [{"_id": chunk_id(held.campaign_id, held.seq)},
                      {"status": ChunkStatus.PENDING.value, "owner": held.owner,
                       "fence": held.fence},
                      {"$or": [{"rescued_at": None}, {"rescued_at": {"$lt": not_since}}]}]},
            {"$set": {"rescued_at": now}})
        return result.modified_count == 1

    async def in_order(self, campaign_id: str) -> AsyncIterator[Chunk]:
        async for document in self._chunks.find({"campaign_id": campaign_id}).sort("seq", 1):
            yield _chunk(document)

    async def erase(self, person: ErasedPerson) -> int:
        """Replace each recipient of ``person`` (by token or user id), in every chunk of every
        campaign, by the erased placeholder (its position stays); how many were replaced.

        No index serves this (one on the recipients would cost every chunk written hundreds of
        entries): it reads the chunks that hold them, a scan of the collection."""
        held = chunk_codec.holding(person)
        if not held:
            return 0
        return await erase_where(self._chunks, {"$or": held}, chunk_codec.RECIPIENT_FIELDS,
                                 person, chunk_codec.erased_in)

    async def count_closed(self, campaign_id: str) -> int:
        """Chunks closed for good (sent, or dead-lettered), read from the chunks themselves."""
        cursor = self._chunks.find({"campaign_id": campaign_id}, {"status": 1})
        closed = {status.value for status in CHUNK_CLOSED_FOR_GOOD}
        return sum([1 async for chunk in cursor if chunk["status"] in closed])


class DeliveryStore:
    def __init__(self, db: Database) -> None:
        self._deliveries = db[names.DELIVERIES]

    async def record(self, campaign_id: str, seq: int, pod_id: str,
                     outcomes: Sequence[RecipientOutcome], now: datetime) -> None:
        """Record FCM's answers for recipients of chunk ``seq``, by position."""
        document = asdict(Delivery.of(campaign_id, seq, pod_id, now, outcomes))
        if not document["suppressed"]:  # a delivery document as before the cap, in most
            del document["suppressed"]
        await self._deliveries.insert_one(document)

    async def recorded(self, campaign_id: str, seq: int) -> Recorded:
        """Everything recorded for chunk ``seq`` so far."""
        recorded: Recorded = {}
        async for document in self._deliveries.find({"campaign_id": campaign_id, "seq": seq}):
            _delivery(document).add_to(recorded)
        return recorded

    async def in_order(self, campaign_id: str) -> AsyncIterator[Delivery]:
        cursor = (self._deliveries.find({"campaign_id": campaign_id})
                  .sort([("seq", 1), ("_id", 1)]).batch_size(1000))
        async for document in cursor:
            yield _delivery(document)


def _delivery(document: dict[str, Any]) -> Delivery:
    """A delivery document, read without a validator: the audit reads thousands of them."""
    return Delivery(
        campaign_id=document["campaign_id"], seq=document["seq"], pod=document["pod"],
        at=document["at"], sent=tuple(document["sent"]),
        failed=tuple(Failure(f["position"], f["error"]) for f in document["failed"]),
        suppressed=tuple(Suppression(s["position"], Rule(s["rule"]))
                         for s in document.get("suppressed", ())))
