"""Where nx-27017 differs from MongoDB, pinned by tests that run unchanged on either server.

Each test states the behaviour Herald relies on; the docstring names the nx-27017 difference
and how Herald (or the launcher) meets it. docs/mongodb-stand-in.md lists the same gaps.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from bson import ObjectId
from pymongo.errors import BulkWriteError

from herald import names
from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.documents import new_id
from herald.domain.messages import Recipient
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from tests.factories import begin_cancel, device, insert


async def test_dates_and_flags_written_by_updates_keep_their_types(stores: Stores,
                                                                   db: Database) -> None:
    """nx-27017 stores a ``$set`` datetime as a naive string and a boolean as 0/1; the
    launcher (devstack/nx_server.py) corrects it. MongoDB keeps BSON dates and booleans."""
    campaign_id = await insert(stores)
    now = utcnow()
    claimed = await stores.campaigns.claim_for_dispatch(campaign_id, "pod", now,
                                                        now + timedelta(seconds=5))
    assert claimed is not None
    assert await stores.campaigns.finish_dispatch(claimed.id, "pod", utcnow()) is not None
    finished = await db[names.CAMPAIGNS].find_one({"_id": ObjectId(campaign_id)})  # as stored
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
    await stores.campaigns.release_dispatch(campaign_id, "a", utcnow() - timedelta(seconds=1))
    taken = await stores.campaigns.claim_for_dispatch(campaign_id, "b", utcnow(),
                                                      utcnow() + timedelta(seconds=5))
    assert taken is not None
    assert taken.dispatch.owner == "b"


async def test_references_between_documents_are_strings(stores: Stores, db: Database) -> None:
    """nx-27017 matches nothing on equality with an ObjectId in a field other than ``_id``;
    Herald stores references (chunk → campaign) as hex strings, which both servers match."""
    campaign_id = await insert(stores)
    await stores.chunks.create(campaign_id, 0, [Recipient(token="t")], None, utcnow())
    chunks = [c async for c in stores.chunks.in_order(campaign_id)]
    assert [c.campaign_id for c in chunks] == [campaign_id]
    stored = await db[names.CHUNKS].find().to_list()
    assert [doc["campaign_id"] for doc in stored] == [campaign_id]
    assert all(isinstance(doc["_id"], ObjectId) for doc in await db["campaigns"].find().to_list())


async def test_cancel_acknowledgements_go_into_an_array_created_with_the_record(
        stores: Stores) -> None:
    """nx-27017's ``$addToSet`` does nothing on a missing field (MongoDB creates the array);
    the cancel record is written with ``acks: []`` so acknowledgements always land."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    begun = await begin_cancel(stores, campaign_id, expected_pods=("p",))
    assert begun is not None and begun.decision is not None
    await stores.campaigns.add_ack(campaign_id, begun.decision, "p")
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.cancel is not None
    assert stored.cancel.acks == ("p",)


async def test_a_campaign_stored_before_amends_existed_still_lists_its_amends(
        stores: Stores, db: Database) -> None:
    """The same gap for ``amended_by``: campaigns are inserted with it, and a campaign stored
    before the field existed gets its array before the first amend is added to it."""
    campaign_id = await insert(stores, status=Status.CANCELLED)
    await db[names.CAMPAIGNS].update_one({"_id": ObjectId(campaign_id)},
                                         {"$unset": {"amended_by": ""}})
    amend_ids = [new_id(), new_id()]
    for amend_id in (*amend_ids, amend_ids[0]):
        await stores.campaigns.link_amendment(campaign_id, amend_id)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.amended_by == tuple(amend_ids)


async def test_device_updates_address_documents_by_id(stores: Stores) -> None:
    """nx-27017 scans the collection for an update filtered on any field but ``_id`` (the
    token index serves finds only); Herald looks ids up first and updates by ``_id``. The
    result must be the same on both servers: only the matching devices change."""
    devices = [device(i, token=f"t{i}", platform="web") for i in range(300)]
    await stores.devices.upsert(devices, utcnow())
    await stores.devices.upsert([device(250, token="t250", platform="ios")], utcnow())
    retired = await stores.devices.mark_invalid(["t251", "t252", "nope"], "UNREGISTERED", utcnow())
    changed = await stores.devices.find_by_token("t250")
    untouched = await stores.devices.find_by_token("t249")
    assert retired == 2
    assert changed is not None
    assert changed.platform == "ios"
    assert untouched is not None
    assert untouched.platform == "web"


async def test_instants_compare_to_the_millisecond(stores: Stores, db: Database) -> None:
    """nx-27017 compares dates with SQLite's datetime(), which drops the fraction of a second:
    a campaign due 400 ms from now would be "due" already. The launcher restores millisecond
    comparisons; MongoDB compares BSON dates to the millisecond."""
    now = utcnow().replace(microsecond=100_000)
    soon = await insert(stores, status=Status.SCHEDULED, due_in_s=0)
    await db[names.CAMPAIGNS].update_one(
        {"_id": ObjectId(soon)}, {"$set": {"due_at": now + timedelta(milliseconds=400)}})
    assert await stores.campaigns.due_scheduled(now) == []
    due = await stores.campaigns.due_scheduled(now + timedelta(milliseconds=400))
    assert [c.id for c in due] == [soon]


async def test_campaigns_without_a_run_key_store_none_under_the_sparse_unique_index(
        stores: Stores, db: Database) -> None:
    """Only schedule runs carry a ``run_key`` (unique, sparse). MongoDB's sparse index still
    indexes an explicit null, so two campaigns stored with ``run_key: null`` would collide there
    (nx-27017 lets them through): Herald leaves the field out instead."""
    first, second = await insert(stores), await insert(stores)
    stored = await db[names.CAMPAIGNS].find(
        {"_id": {"$in": [ObjectId(first), ObjectId(second)]}}).to_list()
    assert len(stored) == 2
    assert all("run_key" not in document for document in stored)


async def test_a_claim_with_an_or_condition_keeps_its_other_conditions(stores: Stores) -> None:
    """nx-27017 drops the conditions next to a multi-branch ``$or`` in an update filter (so a
    claim could take another document); Herald nests them under ``$and``, as both servers read
    the same way. Two cancels: the second campaign's finalization is not the first's."""
    ids = [await insert(stores, status=Status.IN_PROGRESS) for _ in range(2)]
    for campaign_id in ids:
        await begin_cancel(stores, campaign_id)
    past = utcnow() - timedelta(seconds=5)
    assert await stores.campaigns.claim_cancel_finalization(ids[0], "a", past, past)  # expired
    assert await stores.campaigns.claim_cancel_finalization(ids[1], "b", utcnow(),
                                                            utcnow() + timedelta(seconds=30))
    first, second = [await stores.campaigns.get(i) for i in ids]
    assert first is not None and first.cancel is not None and first.cancel.finalizer == "a"
    assert second is not None and second.cancel is not None and second.cancel.finalizer == "b"


async def test_the_first_request_of_a_campaign_is_noted_once(stores: Stores) -> None:
    """``first_request_at: null`` next to ``_id``: the write lands once, on the stand-in too."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    first, second = utcnow(), utcnow()
    assert await stores.campaigns.mark_first_request(campaign_id, first)
    assert not await stores.campaigns.mark_first_request(campaign_id, second)
    noted = await stores.campaigns.get(campaign_id)
    assert noted is not None and noted.first_request_at == first


async def test_a_null_test_beside_an_in_and_a_range_is_made_after_the_query(
        db: Database) -> None:
    """nx-27017 (0.8.1) answers ``{a: {$in: [...]}, b: null, c: {$lte: x}}`` with the
    documents where ``b`` is missing, not those where it is an explicit null (alone, or beside
    an equality, ``b: null`` matches both, as on MongoDB). The fleet gauge of the wait for a
    first request (herald/adapters/fleet_gauges.py) queries status and due time only and tests
    ``first_request_at`` on what comes back."""
    now = utcnow()
    collection = db[names.CAMPAIGNS]
    await collection.insert_many([
        {"name": "explicit", "status": "pending", "first_request_at": None, "due_at": now},
        {"name": "missing", "status": "pending", "due_at": now},
        {"name": "sent", "status": "pending", "first_request_at": now, "due_at": now}])
    due = collection.find({"status": {"$in": ["pending", "in_progress"]},
                           "due_at": {"$lte": now}})
    waiting = sorted([d["name"] async for d in due if d.get("first_request_at") is None])
    assert waiting == ["explicit", "missing"]


async def test_a_range_of_object_ids_is_paged_and_counted_in_id_order(db: Database) -> None:
    """nx-27017 evaluates ``_id`` ranges in Python over the whole collection (seconds per page
    at 200,000 devices); the launcher hands ObjectId ranges to SQLite. Pages, counts and
    ``$count`` must still select exactly the range, in id order, as MongoDB does, and a
    string ``_id`` never falls in an ObjectId range."""
    collection = db[f"range_{new_id()}"]
    ids = sorted(ObjectId() for _ in range(40))
    await collection.insert_many([{"_id": one, "n": i, "keep": i % 3 != 0}
                                  for i, one in enumerate(ids)])
    await collection.insert_one({"_id": "not-an-object-id", "n": -1, "keep": True})
    after, until = ids[9], ids[30]
    within = {"_id": {"$gt": after, "$lte": until}, "keep": True}
    expected = [one for i, one in enumerate(ids) if 9 < i <= 30 and i % 3 != 0]
    page = [doc["_id"] async for doc in collection.find(within).sort("_id", 1).limit(5)]
    assert page == expected[:5]
    assert [doc["_id"] async for doc in collection.find(within).sort("_id", 1)] == expected
    assert await collection.count_documents(within) == len(expected)
    counted = await (await collection.aggregate([{"$match": within},
                                                 {"$count": "n"}])).to_list()
    assert counted == [{"n": len(expected)}]
    before = [doc["_id"] async for doc in collection.find({"_id": {"$lt": ids[2]}})]
    assert before == ids[:2]
    await collection.drop()


async def test_an_insert_of_many_with_a_duplicate_fails_that_one_alone(db: Database) -> None:
    """MongoDB inserts each document of an ``insert`` command on its own: a duplicate key is a
    ``writeErrors`` entry for it; an ordered insert stops there, an unordered one goes on, and
    what was inserted stays. The launcher runs a command's documents in one SQLite transaction
    (nx-27017 commits each alone): still one failure, the others committed, nothing rolled back."""
    devices = db[names.DEVICES]
    await devices.insert_one({"token": "dup-2", "platform": "ios"})
    batch = [{"token": f"dup-{i}", "platform": "ios"} for i in range(5)]
    with pytest.raises(BulkWriteError) as unordered:
        await devices.insert_many([dict(d) for d in batch], ordered=False)
    assert unordered.value.details["nInserted"] == 4
    assert [e["index"] for e in unordered.value.details["writeErrors"]] == [2]
    ordered = [{"token": f"ord-{i}", "platform": "ios"} for i in range(3)] + [
        {"token": "dup-0", "platform": "ios"}, {"token": "ord-9", "platform": "ios"}]
    with pytest.raises(BulkWriteError) as stopped:
        await devices.insert_many(ordered)
    assert stopped.value.details["nInserted"] == 3
    tokens = sorted([d["token"] async for d in devices.find({}, {"token": 1})])
    assert tokens == ["dup-0", "dup-1", "dup-2", "dup-3", "dup-4", "ord-0", "ord-1", "ord-2"]
    await devices.insert_many([{"token": f"many-{i}", "platform": "ios"} for i in range(2_000)])
    assert await devices.count_documents({"token": {"$regex": "^many-"}}) == 2_000


async def test_the_lookup_of_a_chunks_recorded_outcomes_uses_its_index(
        stores: Stores, db: Database) -> None:
    """A sender that takes a chunk over reads what was recorded for it with an equality on
    ``campaign_id`` and ``seq``, the keys of the ``campaign_seq`` index. nx-27017 keeps an
    equality on a string indexed only if the field is the last key of an index (it adds
    MongoDB's "or an array holding it" arm otherwise, which no index serves): it scanned every
    delivery of every campaign (issue 33). The launcher counts every key of an index; MongoDB
    answers with an IXSCAN of ``campaign_seq``."""
    await stores.deliveries.record(new_id(), 3, "pod", [], utcnow())
    explained = await db.command("explain", {"find": names.DELIVERIES,
                                             "filter": {"campaign_id": new_id(), "seq": 3}})
    plan = str(explained["queryPlanner"]["winningPlan"])
    assert "COLLSCAN" not in plan and f"SCAN {names.DELIVERIES}" not in plan, plan
    assert "IXSCAN" in plan or "USING INDEX" in plan, plan
