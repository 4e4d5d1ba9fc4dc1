"""API keys and the operator log in MongoDB.

A key document is ``herald.domain.access.ApiKey`` as stored, with ``_id`` the key's id (a
string) and a unique index on ``secret_hash``: a presented token is found by its digest, and
only the digest is ever written. The operator log is insert-only; ``_id`` order is time order.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import asdict, replace
from datetime import datetime

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from herald import names
from herald.adapters.mongo import Database, Document
from herald.adapters.records import from_bson, maybe, object_id, to_bson
from herald.domain.access import (
    BOOTSTRAP_OWNER,
    TALLY_WINDOW_S,
    Actor,
    ApiKey,
    LogEntry,
    Role,
)

BOOTSTRAP_KEY_ID = "bootstrap"
"""The name of every bootstrap key, and the beginning of its id (``bootstrap<16 hex>``; the
first ones, made before issue 21, have exactly this id)."""


class ApiKeyStore:
    def __init__(self, db: Database) -> None:
        self._keys = db[names.API_KEYS]

    async def insert(self, key: ApiKey) -> None:
        await self._keys.insert_one(to_bson(key, object_id_key=False))

    async def by_digest(self, secret_hash: str) -> ApiKey | None:
        return maybe(ApiKey, await self._keys.find_one({"secret_hash": secret_hash}))

    async def get(self, key_id: str) -> ApiKey | None:
        return maybe(ApiKey, await self._keys.find_one({"_id": key_id}))

    async def page(self, before: str | None, limit: int) -> list[ApiKey]:
        """By id, descending: minted keys newest first (their ids sort in creation order)."""
        query: Document = {"_id": {"$lt": before}} if before is not None else {}
        cursor = self._keys.find(query).sort("_id", DESCENDING).limit(limit)
        return [from_bson(ApiKey, document) async for document in cursor]

    async def revoke(self, key_id: str, by: Actor, now: datetime) -> ApiKey | None:
        """Revoke a key (once; revoking again changes nothing); the key, or None if unknown."""
        revoked = await self._keys.find_one_and_update(
            {"_id": key_id, "revoked_at": None},
            {"$set": {"revoked_at": now, "revoked_by": asdict(by)}},
            return_document=ReturnDocument.AFTER)
        return maybe(ApiKey, revoked) or await self.get(key_id)

    async def touch(self, key_id: str, now: datetime) -> None:
        await self._keys.update_one({"_id": key_id}, {"$set": {"last_used_at": now}})

    async def ensure_bootstrap(self, secret_hash: str, now: datetime) -> ApiKey:
        """The ``admin`` key named ``bootstrap`` with exactly this secret, owned by
        ``bootstrap``: made the first time the secret is configured, and from then on kept as it
        is (one made before keys had owners is given its owner). Its revocation is never undone:
        a revoked bootstrap key stays revoked, however often the api starts with its secret.
        Concurrent api replicas never duplicate it (the digest's index is unique)."""
        with contextlib.suppress(DuplicateKeyError):  # configured before, or by a replica now
            await self.insert(ApiKey(id=f"{BOOTSTRAP_KEY_ID}{secrets.token_hex(8)}",
                                     name=BOOTSTRAP_KEY_ID, role=Role.ADMIN,
                                     secret_hash=secret_hash, created_at=now,
                                     owner=BOOTSTRAP_OWNER))
        stored = await self.by_digest(secret_hash)
        assert stored is not None
        if stored.owner is None:
            await self._keys.update_one({"_id": stored.id}, {"$set": {"owner": BOOTSTRAP_OWNER}})
            stored = replace(stored, owner=BOOTSTRAP_OWNER)
        return stored

    async def retire_bootstraps_before(self, current: ApiKey, by: Actor,
                                       now: datetime) -> list[str]:
        """Revoke every usable bootstrap key made before ``current`` (a rotated secret): the
        ids revoked. A key made after it is kept, so that an old replica restarting with the old
        secret never revokes the new one."""
        older = {"name": BOOTSTRAP_KEY_ID, "created_by": None, "revoked_at": None,
                 "_id": {"$ne": current.id}, "created_at": {"$lt": current.created_at}}
        ids = [document["_id"] async for document in self._keys.find(older, {"_id": 1})]
        for key_id in ids:
            await self.revoke(key_id, by, now)
        return ids


TALLY_FIELD = "tally"
"""Set only on tallied entries (the index on it is unique and sparse: never stored as null)."""


def _tally_of(entry: LogEntry) -> str:
    """What the refusals one entry stands for share: actor, action, status and minute."""
    minute = int(entry.at.timestamp()) // TALLY_WINDOW_S
    actor = entry.actor.id if entry.actor is not None else ""
    return f"{actor}|{entry.action}|{entry.status_code}|{minute}"


class OperatorLogStore:
    def __init__(self, db: Database) -> None:
        self._log = db[names.OPERATOR_LOG]

    async def append(self, entry: LogEntry) -> None:
        await self._log.insert_one(to_bson(entry))

    async def tally(self, entry: LogEntry) -> None:
        """Count ``entry`` into its minute's entry (``tally``: actor, action, status, minute;
        unique): the first refusal of the minute is inserted as it is, with its own id (so the
        log stays in time order), the next ones add to its ``count``. Two replicas inserting
        the same tally at once: the unique index takes one, the other counts into it."""
        tally = _tally_of(entry)
        if await self._count_into(tally):
            return
        try:
            await self._log.insert_one({**to_bson(entry), TALLY_FIELD: tally})
        except DuplicateKeyError:
            await self._count_into(tally)

    async def _count_into(self, tally: str) -> bool:
        counted = await self._log.update_one({TALLY_FIELD: tally}, {"$inc": {"count": 1}})
        return counted.matched_count > 0

    async def page(self, *, campaign_id: str | None, actor_id: str | None, before: str | None,
                   limit: int) -> list[LogEntry]:
        """Newest first, filtered by campaign and by the actor's id."""
        query: Document = {}
        if campaign_id is not None:
            query["campaign_id"] = campaign_id
        if actor_id is not None:
            query["actor.id"] = actor_id
        if before is not None:
            query["_id"] = {"$lt": object_id(before)}
        cursor = self._log.find(query).sort("_id", DESCENDING).limit(limit)
        return [from_bson(LogEntry, document) async for document in cursor]
