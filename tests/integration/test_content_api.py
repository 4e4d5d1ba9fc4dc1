"""Issue 25 at the api (in process, real MongoDB wire server behind it): content with
translations and placeholders is stored as given, a bad template is a 422 that names where it
is, and a preview shows one device's exact message without sending or storing anything."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from bson import ObjectId
from fastapi import FastAPI

from herald import names
from herald.adapters.mongo import Database
from herald.domain.access import Role
from herald.domain.payload import MAX_PAYLOAD_BYTES
from herald.service_layer.ports import Stores
from tests.factories import paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code

GREETING = 'Hola {{ attributes.first_name | default("amigo") }}'
CONTENT: dict[str, Any] = {
    "title": 'Hi {{ attributes.first_name | default("there") }}', "body": "We are live",
    "data": {"landingUrl": "https://example.com/live?u={{ user_id | default('') | urlencode }}"},
    "translations": {"es": {"title": GREETING, "body": "Estamos en vivo"},
                     "pt_br": {"title": "Oi", "body": "Ao vivo",
                               "data": {"landingUrl": "https://example.com/pt"}}}}
DEVICES = [
    {"token": "tok-es", "user_id": "u-1", "platform": "android", "locale": "es-MX",
     "attributes": {"first_name": "Ana"}},
    {"token": "tok-fr", "user_id": "u-2", "platform": "ios", "locale": "fr"},
]


async def _campaigns(db: Database) -> int:
    return await db[names.CAMPAIGNS].count_documents({})


async def test_translations_are_stored_by_canonical_tag_and_shown(api: httpx.AsyncClient) -> None:
    created = await api.post("/v1/campaigns", json={**CONTENT, "send_at": "2099-01-01T00:00:00Z"})
    assert created.status_code == 202, created.text
    view = (await api.get(f"/v1/campaigns/{created.json()['id']}")).json()
    assert set(view["translations"]) == {"es", "pt-BR"}
    assert view["translations"]["es"] == {"title": GREETING, "body": "Estamos en vivo",
                                          "data": {}}


@pytest.mark.parametrize(("body", "field", "variant", "line", "column", "code"), [
    ({"title": "Hi {{ attributes.first_name }}"}, "title", "default", 1, 4, "invalid_template"),
    ({"body": "line one\nHi {{ attributes.name | default('x') | shout }}"}, "body", "default",
     2, 4, "invalid_template"),
    ({"body": "{% for x in y %}{{ x }}{% endfor %}"}, "body", "default", 1, 1,
     "invalid_template"),
    ({"translations": {"es": {"title": "Hola", "body": "Hola {{ user_id "}}},
     "translations.es.body", "es", 1, 6, "invalid_template"),
    ({"translations": {"es": {"title": "Hola {{ device.secret | default('') }}", "body": "x"}}},
     "translations.es.title", "es", 1, 6, "invalid_template"),
    ({"translations": {"de": {"title": "Hallo", "body": "x", "data": {"other": "y"}}}},
     "translations.de.data.other", "de", None, None, "invalid_translation"),
    ({"translations": {"es": {"title": "Hola", "body": "x" * 3990}}}, "translations.es", "es",
     None, None, "payload_too_large"),
])
async def test_content_that_cannot_be_sent_is_a_422_naming_field_variant_and_position(
        api: httpx.AsyncClient, db: Database, body: dict[str, Any], field: str, variant: str,
        line: int | None, column: int | None, code: str) -> None:
    before = await _campaigns(db)
    response = await api.post("/v1/campaigns", json={"title": "Hi", "body": "There",
                                                     "data": {"landingUrl": "x"}, **body})
    assert (response.status_code, error_code(response)) == (422, code), response.text
    detail = response.json()["error"]["details"][0]
    assert (detail["field"], detail["variant"], detail["line"], detail["column"]) == (
        field, variant, line, column)
    assert "Traceback" not in response.text
    assert await _campaigns(db) == before, "a refused create changed something"


async def test_a_schedule_template_an_edit_and_a_follow_up_are_held_to_the_same_rules(
        api: httpx.AsyncClient) -> None:
    bad = {"title": "Hi {{ attributes.first_name }}", "body": "x"}
    schedule = await api.post("/v1/schedules", json={
        "template": bad, "cron": "0 9 * * MON", "timezone": "UTC"})
    assert (schedule.status_code, error_code(schedule)) == (422, "invalid_template")
    created = await api.post("/v1/campaigns", json={**CONTENT, "send_at": "2099-01-01T00:00:00Z"})
    patched = await api.patch(f"/v1/campaigns/{created.json()['id']}", json={
        "translations": {"es": {"title": "{{ locale }}", "body": "x"}}})
    assert (patched.status_code, error_code(patched)) == (422, "invalid_template")


async def _registered(api: httpx.AsyncClient) -> None:
    assert (await api.post("/v1/devices/bulk", json={"devices": DEVICES})).status_code == 200


async def test_a_preview_is_the_devices_exact_message_in_its_language_with_its_name(
        api: httpx.AsyncClient, db: Database) -> None:
    await _registered(api)
    before = await _campaigns(db)
    response = await api.post("/v1/campaigns/preview", json={
        "content": {**CONTENT, "options": {"priority": "high"}}, "token": "tok-es"})
    assert response.status_code == 200, response.text
    preview = response.json()
    assert (preview["variant"], preview["device"]["locale"]) == ("es", "es-MX")
    message = preview["message"]
    assert message["token"] == "…-es"  # masked: "tok-es", its last half
    assert message["notification"] == {"title": "Hola Ana", "body": "Estamos en vivo"}
    assert message["data"] == {"landingUrl": "https://example.com/live?u=u-1"}
    assert message["android"]["priority"] == "HIGH"
    assert preview["size_bytes"] == len(orjson.dumps(
        {k: v for k, v in message.items() if k != "token"}))
    assert await _campaigns(db) == before, "a preview stores nothing"


async def test_a_preview_by_user_id_falls_back_to_the_campaigns_own_words(
        api: httpx.AsyncClient) -> None:
    await _registered(api)
    created = await api.post("/v1/campaigns", json={**CONTENT, "send_at": "2099-01-01T00:00:00Z"})
    campaign_id = created.json()["id"]
    preview = (await api.post("/v1/campaigns/preview", json={
        "campaign_id": campaign_id, "user_id": "u-2"})).json()
    assert preview["variant"] == "default"
    assert preview["message"]["notification"] == {"title": "Hi there", "body": "We are live"}
    assert preview["message"]["android"]["collapse_key"] == f"herald-{campaign_id}"


async def test_a_preview_over_4096_bytes_says_that_device_would_fail(
        api: httpx.AsyncClient) -> None:
    long_name = {**DEVICES[0], "token": "tok-long",
                 "attributes": {"first_name": "A" * 1024, "last_name": "B" * 1024}}
    assert (await api.post("/v1/devices", json=long_name)).status_code == 201
    both = "{{ attributes.first_name | default('') }} {{ attributes.last_name | default('') }}"
    preview = (await api.post("/v1/campaigns/preview", json={
        "content": {"title": both, "body": both}, "token": "tok-long"})).json()
    assert (preview["message"], preview["failure_code"]) == (None, "MESSAGE_TOO_BIG")
    assert str(MAX_PAYLOAD_BYTES) in preview["failure"]


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"content": {"title": "x", "body": "y"}, "token": "nobody"}, 404, "device_not_found"),
    ({"campaign_id": "0" * 24, "token": "tok-es"}, 404, "campaign_not_found"),
    ({"token": "tok-es"}, 422, "validation_error"),
    ({"content": {"title": "x", "body": "y"}, "token": "tok-es", "user_id": "u-1"}, 422,
     "validation_error"),
])
async def test_a_preview_of_nothing_known_is_a_json_error(
        api: httpx.AsyncClient, body: dict[str, Any], status: int, code: str) -> None:
    await _registered(api)
    response = await api.post("/v1/campaigns/preview", json=body)
    assert (response.status_code, error_code(response)) == (status, code)


async def test_who_may_preview(api: httpx.AsyncClient, api_app: FastAPI) -> None:
    await _registered(api)
    body = {"content": {"title": "x", "body": "y"}, "token": "tok-es"}
    for role, allowed in [(Role.OPERATOR, True), (Role.ADMIN, True), (Role.VIEWER, False),
                          (Role.RESPONDER, False), (Role.INGEST, False)]:
        async with client_of(api_app, await mint(api, role)) as client:
            response = await client.post("/v1/campaigns/preview", json=body)
        assert (response.status_code == 200) == allowed, (role, response.text)


async def test_campaigns_and_chunks_stored_before_translations_read_and_audit_as_before(
        api: httpx.AsyncClient, db: Database, stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    await db[names.CAMPAIGNS].update_one({"_id": ObjectId(campaign_id)},
                                         {"$unset": {"content.translations": ""}})
    async for chunk in db[names.CHUNKS].find({"campaign_id": campaign_id}):  # nulls, as before
        legacy = [{"token": token, "user_id": None} for token in chunk["t"]]
        await db[names.CHUNKS].update_one({"_id": chunk["_id"]},
                                          {"$set": {"recipients": legacy},
                                           "$unset": {"t": "", "u": "", "p": ""}})
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None and stored.content.translations == {}
    assert stored.content.profile_need is None
    view = (await api.get(f"/v1/campaigns/{campaign_id}")).json()
    assert view["translations"] == {}
    audit = await api.get(f"/v1/campaigns/{campaign_id}/recipients", params={"outcome": "sent"})
    lines = [orjson.loads(line) for line in audit.content.splitlines()]
    assert lines and {line["variant"] for line in lines} == {"default"}
    assert lines[0]["user_id"] is None
