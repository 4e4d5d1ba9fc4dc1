"""Issue 33, point 4, with separate processes: a person leaves after a campaign reached them.
The app backend's key erases them; their devices are gone, no chunk in MongoDB holds their
tokens or user id, the audit no longer lists them, the campaign's counts are unchanged, and the
operator log names who erased and how much, never whom. One device leaves by its token. A
person erased while a campaign to them is paused is never sent to: the resume offers their
chunk from the store, a placeholder in their place."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pymongo import MongoClient

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.adapters import chunk_codec
from herald.domain.erasure import ErasedPerson
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

POPULATION = 20


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _people(population: list[dict[str, Any]], leaver: str, stayer: str) -> None:
    """Three devices of the leaver, two of the stayer, the rest one person each."""
    for device in population[:3]:
        device["user_id"] = leaver
    for device in population[3:5]:
        device["user_id"] = stayer


def _chunks(stack: Stack, campaign_id: str) -> list[dict[str, Any]]:
    with MongoClient(stack.config.mongodb_url) as client:
        return list(client[stack.config.database].chunks.find({"campaign_id": campaign_id}))


def _chunks_holding(stack: Stack, tokens: list[str], user_id: str) -> int:
    """Chunks of any campaign that still name one of ``tokens`` or ``user_id``."""
    held = chunk_codec.holding(ErasedPerson(user_id, tokens=frozenset(tokens)))
    with MongoClient(stack.config.mongodb_url) as client:
        return int(client[stack.config.database].chunks.count_documents({"$or": held}))


def _devices(stack: Stack, query: dict[str, Any]) -> int:
    with MongoClient(stack.config.mongodb_url) as client:
        return int(client[stack.config.database].devices.count_documents(query))


def _audit(api: Api, campaign_id: str) -> list[dict[str, Any]]:
    return [line for outcome in ("sent", "failed", "unsent")
            for line in api.audit(campaign_id, outcome)]


def test_a_person_who_leaves_is_erased_and_every_count_stays(stack: Stack, fleet: Fleet,
                                                             api: Api) -> None:
    leaver, stayer = f"leaver-{uuid.uuid4().hex}", f"stayer-{uuid.uuid4().hex}"
    population = reachable_devices(POPULATION)
    _people(population, leaver, stayer)
    own, audience = fleet.import_own(api, population)
    theirs = [device["token"] for device in own[:3]]
    campaign_id = api.create_campaign(audience=audience, chunk_size=7)
    counts = api.wait_finished(campaign_id, timeout_s=30)["counts"]
    assert counts["sent"] == POPULATION
    assert set(theirs) <= {line["token"] for line in _audit(api, campaign_id)}
    assert _chunks_holding(stack, theirs, leaver) > 0
    ingest = api.as_key(api.mint_key("ingest", "app-backend-erasure"))
    try:
        erased = ingest.http.delete(f"/v1/users/{leaver}")
        assert (erased.status_code, erased.json()) == (200, {
            "devices": 3, "chunk_recipients": 3, "test_send_outcomes": 0, "archives_pending": False})

        assert _devices(stack, {"user_id": leaver}) == 0
        chunks = _chunks(stack, campaign_id)
        assert sum(chunk["erased"] for chunk in chunks) == 3
        assert not [c["_id"] for c in chunks if any(w in repr(c) for w in (leaver, *theirs))]
        assert _chunks_holding(stack, theirs, leaver) == 0
        lines = _audit(api, campaign_id)
        assert len(lines) == POPULATION - 3
        assert not any(line["user_id"] == leaver or line["token"] in theirs for line in lines)
        assert api.campaign(campaign_id)["counts"] == counts

        stayer_phone = own[3]["token"]
        assert ingest.http.delete(f"/v1/devices/{stayer_phone}").status_code == 204
        assert ingest.http.delete(f"/v1/devices/{stayer_phone}").status_code == 204
        assert _devices(stack, {"user_id": stayer}) == 1
    finally:
        ingest.http.close()

    log = api.http.get("/v1/operator-log", params={"limit": 50}).json()["items"]
    mine = [e for e in log if e["actor"] and e["actor"]["name"] == "app-backend-erasure"]
    assert {(e["action"], e["detail"]) for e in mine} == {
        ("user.erase", "devices=3 chunk_recipients=3 test_send_outcomes=0 archives=none"),
        ("device.delete", "devices=1"), ("device.delete", "devices=0")}
    text = json.dumps(mine)
    assert leaver not in text and not any(t in text for t in (*theirs, stayer_phone))


def test_a_person_erased_while_their_campaign_is_paused_is_never_sent_to(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    leaver = f"leaver-{uuid.uuid4().hex}"
    population = reachable_devices(200)
    for device in population[-3:]:  # in the last chunk
        device["user_id"] = leaver
    own, audience = fleet.import_own(api, population)
    theirs = {device["token"] for device in own[-3:]}
    campaign_id = api.create_campaign(audience=audience, chunk_size=20, rate_per_s=40)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] >= 20, 30,
             "the first chunk to be sent")
    assert api.http.post(f"/v1/campaigns/{campaign_id}/pause").status_code in (200, 202)
    wait_for(lambda: api.campaign(campaign_id)["pause"]["settled_at"], 10, "the pause to settle")

    erased = api.http.delete(f"/v1/users/{leaver}").json()  # an admin may erase too
    # Paging runs ahead of sending by a window, not to the end: the leaver's chunk may not be
    # written yet, and then their devices are gone before it is (never targeted).
    in_chunks = erased["chunk_recipients"]
    assert erased == {"devices": 3, "chunk_recipients": in_chunks, "test_send_outcomes": 0,
                      "archives_pending": False}
    assert in_chunks in (0, 3)
    assert api.http.post(f"/v1/campaigns/{campaign_id}/resume").status_code == 200
    assert api.http.patch(f"/v1/campaigns/{campaign_id}", json={"rate_per_s": 50_000}
                          ).status_code == 200
    campaign = api.wait_finished(campaign_id, timeout_s=30)

    assert not theirs & {received.token for received in emulator.received()}
    assert campaign["counts"] == {"targeted": 197 + in_chunks, "sent": 197, "failed": in_chunks,
                                  "unsent": 0, "maybe_delivered": 0, "suppressed": 0}
    assert len(api.audit(campaign_id, "sent")) == 197
    assert api.audit(campaign_id, "failed") == []  # their places are counted, not listed
