"""``/amend`` and ``/correct`` through the in-process api (real MongoDB wire server, RabbitMQ and
Redis behind it): the answers and their shapes, the links both ways, the refusals that change
nothing, the Idempotency-Key, the scope and the operator log."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from herald import names
from herald.adapters.mongo import Database
from herald.domain.access import Role
from herald.domain.documents import CampaignCounts
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from tests.factories import cancelled_paged_campaign, insert
from tests.integration.helpers import client_of
from tests.support import error_code

FIXED = {"data": {"landingUrl": "https://example.com/fixed"}}
FOLLOW_UP_FIELDS = {"languages", "id", "status", "expected", "targeted", "href"}


async def view(api: httpx.AsyncClient, campaign_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/campaigns/{campaign_id}")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def test_an_amend_is_linked_both_ways_and_carries_the_originals_key(
        api: httpx.AsyncClient, stores: Stores) -> None:
    original = await cancelled_paged_campaign(stores)
    response = await api.post(f"/v1/campaigns/{original.id}/amend",
                              json={"title": "Fixed", **FIXED})
    assert response.status_code == 202
    amend_id = response.json()["id"]
    assert response.json() == {"id": amend_id, "status": "pending",
                               "languages": {"default": original.counts.sent}}
    assert response.headers["Location"] == f"/v1/campaigns/{amend_id}"
    amend, parent = await view(api, amend_id), await view(api, original.id)
    assert (amend["amends"], amend["amended_by"]) == (original.id, [])
    assert amend["retarget"] == {"campaign_id": original.id, "outcome": "sent"}
    assert (amend["title"], amend["body"], amend["data"]) == ("Fixed", "b", FIXED["data"])
    assert amend["replace_key"] == parent["replace_key"] == f"herald-{original.id}"
    assert (parent["amends"], parent["amended_by"]) == (None, [amend_id])


async def test_amend_refusals_change_nothing(api: httpx.AsyncClient, stores: Stores,
                                             db: Database) -> None:
    running = await insert(stores, status=Status.IN_PROGRESS)
    sent_nothing = await insert(stores, status=Status.CANCELLED)
    long_key = await insert(stores, status=Status.COMPLETED, replace_key="k" * 64,
                            counts=CampaignCounts(targeted=1, sent=1))
    before = await db[names.CAMPAIGNS].count_documents({})
    answers = {
        "running": await api.post(f"/v1/campaigns/{running}/amend"),
        "sent nothing": await api.post(f"/v1/campaigns/{sent_nothing}/amend"),
        "unknown": await api.post(f"/v1/campaigns/{'0' * 24}/amend"),
        "too big": await api.post(f"/v1/campaigns/{long_key}/amend", json={"body": "b" * 3690}),
        "bad field": await api.post(f"/v1/campaigns/{long_key}/amend", json={"tilte": "x"}),
        "correct running": await api.post(f"/v1/campaigns/{running}/correct"),
        "correct nobody": await api.post(f"/v1/campaigns/{sent_nothing}/correct"),
    }
    assert {what: (r.status_code, error_code(r)) for what, r in answers.items()} == {
        "running": (409, "not_amendable"), "sent nothing": (409, "nothing_to_amend"),
        "unknown": (404, "campaign_not_found"), "too big": (422, "payload_too_large"),
        "bad field": (422, "validation_error"), "correct running": (409, "not_correctable"),
        "correct nobody": (409, "nothing_to_correct")}
    assert await db[names.CAMPAIGNS].count_documents({}) == before


async def test_a_correction_answers_both_follow_ups_as_documented_and_a_retry_the_same(
        api: httpx.AsyncClient, stores: Stores, db: Database) -> None:
    original = await cancelled_paged_campaign(stores)  # 12 sent, 1 failed, 17 unsent
    path = f"/v1/campaigns/{original.id}/correct"
    first = await api.post(path, json=FIXED, headers={"Idempotency-Key": "fix-1"})
    again = await api.post(path, json=FIXED, headers={"Idempotency-Key": "fix-1"})
    other_body = await api.post(path, json={"body": "x"}, headers={"Idempotency-Key": "fix-1"})
    assert (first.status_code, again.status_code) == (202, 202)
    body = first.json()
    assert set(body) == {"campaign_id", "retarget", "amend"}
    assert body["campaign_id"] == original.id
    assert set(body["retarget"]) == set(body["amend"]) == FOLLOW_UP_FIELDS
    retarget, amend = body["retarget"], body["amend"]
    assert (retarget["expected"], amend["expected"]) == (17, 12)
    assert (retarget["languages"], amend["languages"]) == ({"default": 17}, {"default": 12})
    assert (retarget["status"], retarget["targeted"]) == ("pending", None)
    assert retarget["href"] == f"/v1/campaigns/{retarget['id']}"
    assert again.json() == body
    assert (other_body.status_code, error_code(other_body)) == (422, "idempotency_key_reused")
    assert await db[names.CAMPAIGNS].count_documents({}) == 3
    views = {half: await view(api, body[half]["id"]) for half in ("retarget", "amend")}
    assert views["retarget"]["retarget"] == {"campaign_id": original.id, "outcome": "unsent"}
    assert views["amend"]["amends"] == original.id
    assert {v["replace_key"] for v in views.values()} == {f"herald-{original.id}"}
    assert views["amend"]["data"] == views["retarget"]["data"] == FIXED["data"]
    assert (await view(api, original.id))["amended_by"] == [amend["id"]]
    await _assert_documented(api)


async def test_amend_and_correct_need_the_send_scope_and_go_into_the_operator_log(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores, db: Database) -> None:
    original = await cancelled_paged_campaign(stores)
    operator = await _mint(api, Role.OPERATOR, "marketing")
    responder = await _mint(api, Role.RESPONDER, "on-call")
    async with client_of(api_app, responder) as lead, client_of(api_app, operator) as marketing:
        refused = [await lead.post(f"/v1/campaigns/{original.id}/{action}")
                   for action in ("amend", "correct")]
        amended = await marketing.post(f"/v1/campaigns/{original.id}/amend")
        corrected = await marketing.post(f"/v1/campaigns/{original.id}/correct", json=FIXED)
    assert [(r.status_code, error_code(r)) for r in refused] == [(403, "forbidden")] * 2
    assert (amended.status_code, corrected.status_code) == (202, 202)
    assert (await view(api, amended.json()["id"]))["created_by"]["name"] == "marketing"
    made = corrected.json()
    log = (await api.get("/v1/operator-log", params={"campaign_id": original.id})).json()["items"]
    lines = [(e["action"], e["outcome"], e["actor"]["name"], e["target_id"], e["detail"])
             for e in reversed(log)]
    assert lines == [
        ("campaign.amend", "refused", "on-call", original.id, lines[0][4]),
        ("campaign.correct", "refused", "on-call", original.id, lines[1][4]),
        ("campaign.amend", "done", "marketing", amended.json()["id"],
         "lane=standard purpose=legacy"),  # the original was stored without a purpose
        ("campaign.correct", "done", "marketing", original.id,
         f"retarget={made['retarget']['id']} amend={made['amend']['id']} "
         "lane=standard purpose=legacy")]


async def _assert_documented(api: httpx.AsyncClient) -> None:
    """The answer's shape is in the OpenAPI document, for the console and other clients."""
    document = (await api.get("/openapi.json")).json()
    correct = document["paths"]["/v1/campaigns/{campaign_id}/correct"]["post"]
    amend = document["paths"]["/v1/campaigns/{campaign_id}/amend"]["post"]
    assert (correct["x-herald-scope"], amend["x-herald-scope"]) == ("campaigns:send",) * 2
    assert correct["responses"]["202"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CorrectResult"}
    schemas = document["components"]["schemas"]
    assert set(schemas["FollowUpCreated"]["properties"]) == FOLLOW_UP_FIELDS
    assert "idempotency-key" in {p["name"] for p in correct["parameters"]}


async def _mint(api: httpx.AsyncClient, role: Role, name: str) -> str:
    response = await api.post("/v1/api-keys", json={"name": name, "role": role.value})
    assert response.status_code == 201, response.text
    return str(response.json()["secret"])
