"""Where nx-27017 differs from MongoDB, pinned by tests that run unchanged on either server.

Each test states the behaviour Herald relies on; the docstring names the nx-27017 difference
and how Herald (or the launcher) meets it. The README lists the same gaps.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bson import ObjectId

from herald.adapters.mongo import Database
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.status import Transition
from tests.integration.test_campaign_store import insert


async def test_dates_and_flags_written_by_updates_keep_their_types(stores: Stores) -> None:
    """nx-27017 stores a ``$set`` datetime as a naive string and a boolean as 0/1; the
    launcher (devstack/nx_server.py) corrects it. MongoDB keeps BSON dates and booleans."""
    campaign_id = await insert(stores)
    now = utcnow()
    claimed = await stores.campaigns.claim_for_dispatch(campaign_id, "pod", now,
                                                        now + timedelta(seconds=5))
    assert claimed is not None
    finished = await stores.campaigns.finish_dispatch(claimed["_id"], "pod", utcnow())
    assert finished is not None
    assert isinstance(finished["started_at"], datetime)
    assert finished["started_at"].tzinfo is not None
    assert isinstance(finished["dispatch"]["lease_until"], datetime)
    assert finished["dispatch"]["done"] is True


async def test_expired_leases_compare_as_instants(stores: Stores) -> None:
    """Lease expiry is a date comparison; it must not depend on how the date was written."""
    campaign_id = await insert(stores)
    now = utcnow()
    await stores.campaigns.claim_for_dispatch(campaign_id, "a", now, now + timedelta(hours=1))
    assert await stores.campaigns.claim_for_dispatch(campaign_id, "b", utcnow(),
                                                     utcnow() + timedelta(seconds=5)) is None
    await stores.campaigns.release_dispatch(ObjectId(campaign_id), "a", utcnow() - timedelta(seconds=1))
    taken = await stores.campaigns.claim_for_dispatch(campaign_id, "b", utcnow(),
                                                      utcnow() + timedelta(seconds=5))
    assert taken is not None
    assert taken["dispatch"]["owner"] == "b"


async def test_references_between_documents_are_strings(stores: Stores, db: Database) -> None:
    """nx-27017 matches nothing on equality with an ObjectId in a field other than ``_id``;
    Herald stores references (chunk → campaign) as hex strings, which both servers match."""
    campaign_id = await insert(stores)
    await stores.chunks.create(campaign_id, 0, [{"token": "t", "user_id": None}], None, utcnow())
    chunks = [c async for c in stores.chunks.in_order(campaign_id)]
    assert [c["campaign_id"] for c in chunks] == [campaign_id]
    assert all(isinstance(doc["_id"], ObjectId) for doc in await db["campaigns"].find().to_list())


async def test_cancel_acknowledgements_go_into_an_array_created_with_the_record(
        stores: Stores) -> None:
    """nx-27017's ``$addToSet`` does nothing on a missing field (MongoDB creates the array);
    the cancel record is written with ``acks: []`` so acknowledgements always land."""
    campaign_id = await insert(stores, status="in_progress")
    await stores.campaigns.transition(
        campaign_id, Transition.BEGIN_CANCEL, utcnow(),
        also_set={"cancel": {"requested_at": utcnow(), "expected_pods": ["p"], "acks": []}})
    await stores.campaigns.add_cancel_ack(campaign_id, "p")
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    assert stored["cancel"]["acks"] == ["p"]


async def test_device_updates_address_documents_by_id(stores: Stores) -> None:
    """nx-27017 scans the collection for an update filtered on any field but ``_id`` (the
    token index serves finds only); Herald looks ids up first and updates by ``_id``. The
    result must be the same on both servers: only the matching devices change."""
    devices = [{"token": f"t{i}", "platform": "web", "push_enabled": True} for i in range(300)]
    await stores.devices.upsert(devices, utcnow())
    await stores.devices.upsert([{**devices[250], "platform": "ios"}], utcnow())
    retired = await stores.devices.mark_invalid(["t251", "t252", "nope"], "UNREGISTERED", utcnow())
    changed = await stores.devices.find_by_token("t250")
    untouched = await stores.devices.find_by_token("t249")
    assert retired == 2
    assert changed is not None
    assert changed["platform"] == "ios"
    assert untouched is not None
    assert untouched["platform"] == "web"


async def test_instants_compare_to_the_millisecond(stores: Stores) -> None:
    """nx-27017 compares dates with SQLite's datetime(), which drops the fraction of a second:
    a campaign due 400 ms from now would be "due" already. The launcher restores millisecond
    comparisons; MongoDB compares BSON dates to the millisecond."""
    now = utcnow().replace(microsecond=100_000)
    soon = await insert(stores, status="scheduled", due_in_s=0)
    await stores.campaigns._campaigns.update_one(
        {"_id": ObjectId(soon)}, {"$set": {"due_at": now + timedelta(milliseconds=400)}})
    assert await stores.campaigns.due_scheduled(now) == []
    due = await stores.campaigns.due_scheduled(now + timedelta(milliseconds=400))
    assert [str(c["_id"]) for c in due] == [soon]
