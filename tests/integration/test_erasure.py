"""A person leaves (issue 33), on the MongoDB wire server: their devices, their place in every
chunk and every test send are erased, and the counts recomputed from the records do not move.
Then the two routes on the in-process api: scopes, answers, and an operator log that names the
actor and the counts, never the token or the user id."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from herald import names
from herald.adapters.mongo import Database
from herald.adapters.rate_limit import Budget
from herald.clock import utcnow
from herald.domain.documents import Outcome, TestOutcome, TestSend, new_id
from herald.domain.status import Status
from herald.service_layer.erasure import Erasure, erase_user
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import audit, final_counts
from services.api.auth import api_routes
from services.api.gate import budget_of
from tests.factories import actor, device, paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code

DANA_TOKENS = ("tok-00003", "tok-00011", "tok-00024")
"""Dana's three phones: sent, failed (UNREGISTERED) and unsent in ``paged_campaign``."""


async def dana(stores: Stores) -> None:
    """Dana's phones registered under her user id (the chunks knew them as u3, u11, u24), a
    test send that reached one of them, and a phone of someone else."""
    await stores.devices.upsert([device(3, user_id="dana"), device(11, user_id="dana"),
                                 device(24, user_id="dana"), device(4)], utcnow())
    [phone] = [d for d in await stores.devices.of_user("dana") if d.token == "tok-00003"]
    await stores.test_sends.insert(TestSend(
        id=new_id(), campaign_id="c", at=utcnow(), by=actor("ops"), status=Status.PENDING,
        outcomes=(TestOutcome(device_id=phone.id, token_suffix="00000003", user_id="dana"),
                  TestOutcome(device_id="other", token_suffix="00000004", user_id="u4"))))


def mentions(document: Any, words: tuple[str, ...]) -> bool:
    text = repr(document)
    return any(word in text for word in words)


async def test_a_person_is_erased_everywhere_and_every_count_stays(stores: Stores,
                                                                   db: Database) -> None:
    campaign_id = await paged_campaign(stores)
    await dana(stores)
    campaign = await stores.campaigns.get(campaign_id)
    assert campaign is not None
    before = await final_counts(stores, campaign)

    erased = await erase_user(stores.devices, stores.chunks, stores.test_sends, "dana")

    assert erased == Erasure(devices=3, recipients=3, test_outcomes=1)
    assert await final_counts(stores, campaign) == before
    every_line = [line.token for outcome in Outcome
                  async for line in audit(stores, campaign, outcome)]
    assert len(every_line) == 27 and not set(DANA_TOKENS) & set(every_line)
    words = (*DANA_TOKENS, "'dana'", "'u3'", "'u11'", "'u24'")
    for collection in (names.DEVICES, names.CHUNKS, names.TEST_SENDS):
        found = [d async for d in db[collection].find({}) if mentions(d, words)]
        assert found == [], collection
    assert await db[names.DEVICES].count_documents({"token": "tok-00004"}) == 1
    assert await erase_user(stores.devices, stores.chunks, stores.test_sends, "dana") == \
        Erasure(devices=0, recipients=0, test_outcomes=0)


async def test_chunks_written_before_the_parallel_arrays_are_erased_in_their_own_format(
        stores: Stores, db: Database) -> None:
    """A chunk stored as an array of subdocuments (before issue 33's codec) is found by the
    person's tokens and user id, and rewritten as it was written, placeholders in place."""
    await dana(stores)
    campaign = await stores.campaigns.get(await paged_campaign(stores))
    assert campaign is not None
    async for chunk in db[names.CHUNKS].find({"campaign_id": campaign.id}):
        legacy = [{"token": token, "user_id": user_id}
                  for token, user_id in zip(chunk["t"], chunk["u"], strict=True)]
        await db[names.CHUNKS].update_one({"_id": chunk["_id"]},
                                          {"$set": {"recipients": legacy},
                                           "$unset": {"t": "", "u": ""}})
    before = await final_counts(stores, campaign)

    erased = await erase_user(stores.devices, stores.chunks, stores.test_sends, "dana")

    assert erased.recipients == 3
    assert await final_counts(stores, campaign) == before
    chunk = await db[names.CHUNKS].find_one({"campaign_id": campaign.id, "seq": 0})
    assert chunk is not None and "t" not in chunk
    assert chunk["recipients"][3] == {"token": "", "erased": True}
    every_line = [line.token for outcome in Outcome
                  async for line in audit(stores, campaign, outcome)]
    assert len(every_line) == 27 and not set(DANA_TOKENS) & set(every_line)


async def test_two_erasures_of_one_chunk_at_once_both_hold(stores: Stores, db: Database) -> None:
    """Each rewrites the chunk conditionally on its erased count: neither undoes the other."""
    import asyncio

    campaign_id = await paged_campaign(stores)
    people = [f"u{i}" for i in range(10)]
    await asyncio.gather(*(erase_user(stores.devices, stores.chunks, stores.test_sends, person)
                           for person in people))
    chunk = await db[names.CHUNKS].find_one({"campaign_id": campaign_id, "seq": 0})
    assert chunk is not None
    assert chunk["erased"] == 10
    assert chunk["t"] == [""] * 10 and chunk.get("u") is None


async def test_the_routes_erase_and_log_without_the_erased_data(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores) -> None:
    await dana(stores)
    ingest = client_of(api_app, await mint(api, "ingest", "app-backend"))
    viewer = client_of(api_app, await mint(api, "viewer"))
    async with ingest, viewer:
        refused = await viewer.delete("/v1/users/dana")
        assert (refused.status_code, error_code(refused)) == (403, "forbidden")
        assert len(await stores.devices.of_user("dana")) == 3

        gone = await ingest.delete("/v1/devices/tok-00004")
        again = await ingest.delete("/v1/devices/tok-00004")
        erased = await ingest.delete("/v1/users/dana")
        too_long = await ingest.delete("/v1/devices/" + "t" * 4097)
        longest = await ingest.delete("/v1/devices/" + "t" * 4096)

    assert (gone.status_code, again.status_code, longest.status_code) == (204, 204, 204)
    assert (erased.status_code, erased.json()) == (200, {
        "devices": 3, "chunk_recipients": 0, "test_send_outcomes": 1, "archives_pending": False})
    assert (too_long.status_code, error_code(too_long)) == (422, "validation_error")
    log = (await api.get("/v1/operator-log", params={"limit": 20})).json()["items"]
    entries = {(e["action"], e["detail"]) for e in log if e["actor"]["name"] == "app-backend"}
    assert ("user.erase", "devices=3 chunk_recipients=0 test_send_outcomes=1 archives=none") in entries
    assert {("device.delete", "devices=1"), ("device.delete", "devices=0")} <= entries
    assert not mentions(log, ("dana", "tok-00004", "t" * 64))


def test_both_routes_spend_from_the_budget_of_changes(api_app: FastAPI) -> None:
    erasing = {route.path: budget_of(route) for route in api_routes(api_app.router.routes)
               if "DELETE" in (route.methods or ()) and route.path in (
                   "/v1/devices/{token}", "/v1/users/{user_id}")}
    assert erasing == {"/v1/devices/{token}": Budget.WRITE, "/v1/users/{user_id}": Budget.WRITE}
