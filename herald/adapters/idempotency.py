"""Idempotency keys for campaign creation (``Idempotency-Key`` header), one document per key."""

from __future__ import annotations

from datetime import datetime

from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document
from herald.domain.documents import IdempotencyBinding


def _binding(document: Document) -> IdempotencyBinding:
    return IdempotencyBinding(key=document["_id"], fingerprint=document["fingerprint"],
                              campaign_id=document["campaign_id"],
                              created_at=document["created_at"])


class IdempotencyKeys:
    """Maps a client's key to the campaign its first request created, with the request's hash."""

    def __init__(self, db: Database) -> None:
        self._keys = db[names.IDEMPOTENCY_KEYS]

    async def reserve(self, binding: IdempotencyBinding) -> IdempotencyBinding | None:
        """Bind the key to its campaign; if the key was bound before, that earlier binding."""
        try:
            await self._keys.insert_one({
                "_id": binding.key, "fingerprint": binding.fingerprint,
                "campaign_id": binding.campaign_id, "created_at": binding.created_at})
        except DuplicateKeyError:
            earlier = await self._keys.find_one({"_id": binding.key})
            return None if earlier is None else _binding(earlier)
        return None

    async def expire(self, before: datetime) -> int:
        """Forget keys bound before ``before``; how many."""
        result = await self._keys.delete_many({"created_at": {"$lt": before}})
        return result.deleted_count

    async def rebind(self, key: str, stale_campaign_id: str, campaign_id: str) -> bool:
        """Take over a key whose first request died before creating its campaign."""
        result = await self._keys.update_one({"_id": key, "campaign_id": stale_campaign_id},
                                             {"$set": {"campaign_id": campaign_id}})
        return result.modified_count == 1
