"""MongoDB connection and indexes, through PyMongo's asyncio API (the successor of motor).

Schema notes that hold on MongoDB and on the nx-27017 wire server used for development:
- ``_id`` of devices, campaigns and schedules is an ObjectId; references between documents
  (``campaign_id`` of a chunk, ``schedule_id`` of a campaign...) are stored as hex strings.
- No index contains ``_id`` next to other keys, and arrays updated with ``$addToSet`` are created
  empty when their document is written.
"""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from herald import names
from herald.settings import Settings

Document = dict[str, Any]
Database = AsyncDatabase[Document]


def connect(settings: Settings, app_name: str) -> AsyncMongoClient[Document]:
    """Client for the stack's MongoDB; it connects lazily, on first use."""
    return AsyncMongoClient(
        settings.mongodb_url,
        tz_aware=True,
        appname=app_name,
        serverSelectionTimeoutMS=5_000,
    )


def database(client: AsyncMongoClient[Document], settings: Settings) -> Database:
    return client[settings.mongodb_database]


INDEXES: dict[str, list[tuple[list[tuple[str, int]], dict[str, Any]]]] = {
    names.DEVICES: [
        ([("token", ASCENDING)], {"unique": True, "name": "token_unique"}),
        ([("user_id", ASCENDING)], {"name": "user_id"}),
        # Every audience filter starts with these (``devices.audience_filter``): a count of all
        # devices, the estimate's, is read from this index alone (1,000,000 devices: 2.4 s
        # streamed through nx-27017's JSON, 0.2 s from the index, 2026-11-28).
        ([("invalid", ASCENDING), ("push_enabled", ASCENDING), ("marketing_enabled", ASCENDING)],
         {"name": "audience_flags"}),
    ],
    names.CAMPAIGNS: [
        ([("status", ASCENDING), ("created_at", DESCENDING)], {"name": "status_created"}),
        ([("status", ASCENDING), ("due_at", ASCENDING)], {"name": "status_due"}),
        ([("schedule_id", ASCENDING)], {"name": "schedule_id"}),
        ([("follow_up.campaign_id", ASCENDING)], {"name": "follow_up_of"}),
        ([("run_key", ASCENDING)], {"name": "run_key_unique", "unique": True, "sparse": True}),
    ],
    names.CHUNKS: [
        ([("campaign_id", ASCENDING), ("seq", ASCENDING)], {"name": "campaign_seq"}),
        ([("status", ASCENDING), ("campaign_id", ASCENDING)], {"name": "status_campaign"}),
    ],
    names.DELIVERIES: [
        ([("campaign_id", ASCENDING), ("seq", ASCENDING)], {"name": "campaign_seq"}),
    ],
    names.API_KEYS: [
        ([("secret_hash", ASCENDING)], {"unique": True, "name": "secret_hash_unique"}),
    ],
    names.OPERATOR_LOG: [
        ([("campaign_id", ASCENDING)], {"name": "campaign_id"}),
        ([("actor.id", ASCENDING)], {"name": "actor_id"}),
        ([("tally", ASCENDING)], {"name": "tally_unique", "unique": True, "sparse": True}),
    ],
    names.TEST_SENDS: [
        ([("campaign_id", ASCENDING)], {"name": "campaign_id"}),
        ([("at", ASCENDING)], {"name": "at"}),
    ],
    names.IDEMPOTENCY_KEYS: [
        ([("created_at", ASCENDING)], {"name": "created_at"}),
    ],
    names.SCHEDULES: [
        ([("state", ASCENDING), ("next_run_at", ASCENDING)], {"name": "state_next_run"}),
    ],
}


async def ensure_indexes(db: Database) -> None:
    """Create the indexes Herald's queries rely on (idempotent; every service may call it)."""
    for collection, indexes in INDEXES.items():
        for keys, options in indexes:
            await db[collection].create_index(keys, **options)
