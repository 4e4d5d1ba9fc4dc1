"""Test sends in MongoDB (``test_sends``): a campaign's message sent to a few named devices,
kept apart from its chunks and deliveries so that no count or audit ever includes them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from pymongo import DESCENDING

from herald import names
from herald.adapters.erasing import erase_entries
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, to_bson
from herald.domain.documents import TestSend
from herald.domain.erasure import ErasedPerson


def _blank(outcome: Document) -> Document:
    return {**outcome, "device_id": "", "token_suffix": "", "user_id": None, "erased": True}


class TestSendStore:

    __test__ = False  # not a pytest test class
    def __init__(self, db: Database) -> None:
        self._sends = db[names.TEST_SENDS]

    async def expire(self, before: datetime) -> int:
        """Delete the records of test sends made before ``before``; how many."""
        result = await self._sends.delete_many({"at": {"$lt": before}})
        return result.deleted_count

    async def erase(self, person: ErasedPerson) -> int:
        """Blank ``person``'s devices (by device id or user id) in every test send; FCM's
        answer to each stays. How many outcomes were blanked."""
        return await erase_entries(self._sends, "outcomes", person, _blank)

    async def insert(self, record: TestSend) -> None:
        await self._sends.insert_one(to_bson(record))

    async def of_campaign(self, campaign_id: str, limit: int = 50) -> list[TestSend]:
        """The campaign's test sends, newest first."""
        cursor = self._sends.find({"campaign_id": campaign_id}).sort("_id", DESCENDING)
        return [from_bson(TestSend, document) async for document in cursor.limit(limit)]

    async def per_device_since(self, device_ids: Sequence[str], since: datetime
                               ) -> dict[str, int]:
        """How many test sends reached each of ``device_ids`` since ``since``."""
        wanted, counts = set(device_ids), Counter[str]()
        async for document in self._sends.find({"at": {"$gte": since}},
                                               {"outcomes.device_id": 1}):
            counts.update(o["device_id"] for o in document.get("outcomes", ())
                          if o.get("device_id") in wanted)
        return dict(counts)
