"""Idempotency keys for campaign creation (``Idempotency-Key`` header), one document per key."""

from __future__ import annotations

from datetime import datetime

from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document


class IdempotencyKeys:
    """Maps a client's key to the campaign its first request created, with the request's hash."""

    def __init__(self, db: Database) -> None:
        self._keys = db[names.IDEMPOTENCY_KEYS]

    async def reserve(self, key: str, fingerprint: str, campaign_id: str,
                      now: datetime) -> Document | None:
        """Bind ``key`` to ``campaign_id``; if the key was bound before, that earlier binding."""
        try:
            await self._keys.insert_one({"_id": key, "fingerprint": fingerprint,
                                         "campaign_id": campaign_id, "created_at": now})
        except DuplicateKeyError:
            return await self._keys.find_one({"_id": key})
        return None

    async def rebind(self, key: str, stale_campaign_id: str, campaign_id: str) -> bool:
        """Take over a key whose first request died before creating its campaign."""
        result = await self._keys.update_one({"_id": key, "campaign_id": stale_campaign_id},
                                             {"$set": {"campaign_id": campaign_id}})
        return result.modified_count == 1
