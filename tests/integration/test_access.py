"""Access control on the in-process api (real MongoDB wire server, RabbitMQ and Redis behind it):
keys and roles, refusals that change nothing, the actor of every change, the operator log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from herald import names
from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.contracts.http import DeviceIn
from herald.domain.access import Role
from herald.domain.approval import approval_digest
from herald.domain.audience import Platform
from herald.domain.status import Status, Transition
from herald.service_layer.access import ensure_bootstrap_key
from herald.settings import Settings
from services.api.app import create_app
from services.api.auth import api_routes, declared_scope
from tests.factories import CAMPAIGN_BODY, campaign, paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code, eventually

OPEN = {"/healthz", "/readyz", "/metrics", "/docs", "/docs/assets", "/openapi.json", "/console"}
"""Routes without a key. ``/console`` serves the console's static files only (HTML, one script,
one style sheet); every data call the console makes goes to ``/v1`` with the signed-in key."""


def test_every_v1_route_declares_who_may_call_it(api_app: FastAPI) -> None:
    routes = list(api_routes(api_app.router.routes))
    undeclared = [f"{sorted(r.methods)} {r.path}" for r in routes
                  if r.path.startswith("/v1") and declared_scope(r) is None]
    assert undeclared == []
    assert {r.path for r in routes if not r.path.startswith("/v1")} <= OPEN
    assert {r.path for r in api_app.routes if hasattr(r, "path")} <= OPEN  # FastAPI's own
    assert len([r for r in routes if r.path.startswith("/v1")]) >= 20


async def test_the_console_is_static_files_open_to_all_with_a_strict_policy(
        api_app: FastAPI) -> None:
    async with client_of(api_app, None) as anonymous:
        index = await anonymous.get("/console/")
        script = await anonymous.get("/console/console.js")
        redirect = await anonymous.get("/console")
        data = await anonymous.get("/v1/campaigns")
    assert index.status_code == 200 and "<title>Herald console</title>" in index.text
    assert "default-src 'self'" in index.headers["content-security-policy"]
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert redirect.status_code in (307, 308)
    assert data.status_code == 401


async def test_the_openapi_document_declares_the_bearer_scheme_and_each_scope(
        api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    cancel = document["paths"]["/v1/campaigns/{campaign_id}/cancel"]["post"]
    assert cancel["x-herald-scope"] == "campaigns:cancel"
    assert cancel["security"] == [{"ApiKey": []}]
    assert "security" not in document["paths"]["/healthz"]["get"]


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer hrld_nope_nope",
                                           "Basic dXNlcjpwYXNz"])
async def test_a_call_without_a_valid_key_is_refused_with_401(
        api_app: FastAPI, db: Database, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with client_of(api_app, None) as anonymous:
        created = await anonymous.post("/v1/campaigns", json=CAMPAIGN_BODY, headers=headers)
        listed = await anonymous.get("/v1/campaigns", headers=headers)
        health = await anonymous.get("/healthz")
    for response in (created, listed):
        assert (response.status_code, error_code(response)) == (401, "unauthenticated")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert health.status_code == 200
    assert await db[names.CAMPAIGNS].count_documents({}) == 0


async def test_revoked_and_expired_keys_are_refused(api: httpx.AsyncClient,
                                                    api_app: FastAPI) -> None:
    revoked = await mint(api, Role.VIEWER, "soon revoked")
    expired = await mint(api, Role.VIEWER, "short lived",
                         expires_at=(utcnow() - timedelta(seconds=1)).isoformat())
    key_id = revoked.split("_")[1]
    async with client_of(api_app, revoked) as before:
        assert (await before.get("/v1/campaigns")).status_code == 200
    assert (await api.delete(f"/v1/api-keys/{key_id}")).status_code == 200
    for token in (revoked, expired):
        async with client_of(api_app, token) as client:

            async def refused(client: httpx.AsyncClient = client) -> bool:
                return (await client.get("/v1/campaigns")).status_code == 401

            assert await eventually(refused, timeout_s=2, what="the key to be refused")


# --- the role matrix -------------------------------------------------------------------------------
Call = Callable[[httpx.AsyncClient, dict[str, str]], Awaitable[httpx.Response]]
"""A call of one endpoint group, given the ids of objects made for it."""

GROUPS: dict[str, tuple[Call, set[Role]]] = {
    "read campaigns": (lambda c, ids: c.get(f"/v1/campaigns/{ids['running']}"),
                       {Role.VIEWER, Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "read the audit": (lambda c, ids: c.get(f"/v1/campaigns/{ids['finished']}/recipients",
                                            params={"outcome": "sent"}),
                       {Role.VIEWER, Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "read schedules": (lambda c, ids: c.get("/v1/schedules"),
                       {Role.VIEWER, Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "read pods": (lambda c, ids: c.get("/v1/pods"),
                  {Role.VIEWER, Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "read the operator log": (lambda c, ids: c.get("/v1/operator-log"),
                              {Role.VIEWER, Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "cancel": (lambda c, ids: c.post(f"/v1/campaigns/{ids['running']}/cancel"),
               {Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "pause": (lambda c, ids: c.post(f"/v1/campaigns/{ids['to_pause']}/pause"),
              {Role.RESPONDER, Role.OPERATOR, Role.ADMIN}),
    "resume": (lambda c, ids: c.post(f"/v1/campaigns/{ids['paused']}/resume"),
               {Role.OPERATOR, Role.ADMIN}),
    "change the rate": (lambda c, ids: c.patch(f"/v1/campaigns/{ids['to_pause']}",
                                               json={"rate_per_s": 100}),
                        {Role.OPERATOR, Role.ADMIN}),
    "send": (lambda c, ids: c.post("/v1/campaigns", json=CAMPAIGN_BODY),
             {Role.OPERATOR, Role.ADMIN}),
    "retarget": (lambda c, ids: c.post(f"/v1/campaigns/{ids['finished']}/retarget"),
                 {Role.OPERATOR, Role.ADMIN}),
    "preview": (lambda c, ids: c.post("/v1/campaigns/preview", json={
        "campaign_id": ids["running"], "token": ids["device"]}), {Role.OPERATOR, Role.ADMIN}),
    "approve": (lambda c, ids: c.post(f"/v1/campaigns/{ids['awaiting']}/approve",
                                      json={"digest": ids["awaiting_digest"]}),
                {Role.OPERATOR, Role.ADMIN}),
    "test send": (lambda c, ids: c.post(f"/v1/campaigns/{ids['awaiting']}/test",
                                        json={"tokens": [ids["tester"]]}),
                  {Role.OPERATOR, Role.ADMIN}),
    "schedule": (lambda c, ids: c.post("/v1/schedules", json={
        "template": CAMPAIGN_BODY, "cron": "0 9 * * MON", "timezone": "Asia/Seoul"}),
                 {Role.OPERATOR, Role.ADMIN}),
    "register devices": (lambda c, ids: c.post("/v1/devices", json={
        "token": f"tok-{ids['token']}", "platform": "ios"}), {Role.INGEST, Role.ADMIN}),
    "manage keys": (lambda c, ids: c.get("/v1/api-keys"), {Role.ADMIN}),
    "unregister a device": (lambda c, ids: c.delete(f"/v1/devices/{ids['device']}"),
                            {Role.INGEST, Role.ADMIN}),
    "erase a person": (lambda c, ids: c.delete(f"/v1/users/leaver-{ids['token']}"),
                       {Role.INGEST, Role.ADMIN}),
}

COLLECTIONS = (names.CAMPAIGNS, names.SCHEDULES, names.DEVICES, names.API_KEYS,
               names.TEST_SENDS)


async def _objects(api: httpx.AsyncClient, api_app: FastAPI, role: Role) -> dict[str, str]:
    stores = api_app.state.services.stores
    running, to_pause = campaign(status=Status.IN_PROGRESS), campaign(status=Status.IN_PROGRESS)
    paused = campaign(status=Status.PAUSED)
    for record in (running, to_pause, paused):
        await stores.campaigns.insert(record)
    finished = await paged_campaign(stores)
    await stores.campaigns.transition(finished, Transition.FAIL, utcnow())
    device = DeviceIn(token=f"preview-{role.value}", platform=Platform.ANDROID)
    await stores.devices.upsert([device], utcnow())
    awaiting = campaign(status=Status.AWAITING_APPROVAL)
    await stores.campaigns.insert(awaiting)
    tester = f"tok-tester-{role.value}"
    await stores.devices.upsert([DeviceIn(token=tester, platform="android")], utcnow())
    return {"running": running.id, "finished": finished, "token": role.value,
            "device": device.token, "awaiting": awaiting.id, "tester": tester,
            "awaiting_digest": approval_digest(awaiting),
            "to_pause": to_pause.id, "paused": paused.id}


async def _counts(db: Database) -> dict[str, int]:
    return {name: await db[name].count_documents({}) for name in COLLECTIONS}


@pytest.mark.parametrize("role", list(Role))
async def test_each_role_may_do_what_its_scopes_allow_and_nothing_else(
        api: httpx.AsyncClient, api_app: FastAPI, db: Database, role: Role) -> None:
    token = await mint(api, role)
    ids = await _objects(api, api_app, role)
    async with client_of(api_app, token) as client:
        for group, (call, allowed) in GROUPS.items():
            before = await _counts(db)
            response = await call(client, ids)
            if role in allowed:
                assert 200 <= response.status_code < 300, (group, response.text)
            else:
                assert (response.status_code, error_code(response)) == (403, "forbidden"), group
                assert await _counts(db) == before, f"a refused {group} changed something"
    running = await api_app.state.services.stores.campaigns.get(ids["running"])
    cancelled = running.status is not Status.IN_PROGRESS
    assert cancelled == (role in GROUPS["cancel"][1])
    paused = await api_app.state.services.stores.campaigns.get(ids["paused"])
    assert (paused.status is Status.IN_PROGRESS) == (role in GROUPS["resume"][1])


async def test_a_403_names_the_missing_scope_and_is_logged(api: httpx.AsyncClient,
                                                           api_app: FastAPI) -> None:
    viewer = await mint(api, Role.VIEWER, "night shift")
    async with client_of(api_app, viewer) as client:
        refused = await client.post("/v1/campaigns", json=CAMPAIGN_BODY)
    assert refused.status_code == 403
    assert "campaigns:send" in refused.json()["error"]["message"]
    log = (await api.get("/v1/operator-log")).json()["items"]
    assert [(e["action"], e["outcome"], e["status_code"], e["actor"]["name"]) for e in log
            if e["action"] == "campaign.create"] == [
        ("campaign.create", "refused", 403, "night shift")]


# --- actors and the operator log -------------------------------------------------------------------
async def test_every_change_records_the_key_that_made_it_not_what_the_caller_claims(
        api: httpx.AsyncClient, api_app: FastAPI) -> None:
    operator = await mint(api, Role.OPERATOR, "marketing")
    responder = await mint(api, Role.RESPONDER, "on-call")
    async with client_of(api_app, operator) as marketing, client_of(api_app, responder) as lead:
        created = (await marketing.post("/v1/campaigns", json={
            **CAMPAIGN_BODY, "audience": {"user_ids": ["nobody"]}},
            headers={"X-Requested-By": "the CEO"})).json()["id"]
        cancelled = (await lead.post(f"/v1/campaigns/{created}/cancel",
                                     json={"reason": "wrong link"},
                                     headers={"X-Requested-By": "alice"})).json()
        retargeted = (await marketing.post(f"/v1/campaigns/{created}/retarget")).status_code
    view = (await api.get(f"/v1/campaigns/{created}")).json()
    assert view["created_by"]["name"] == "marketing"
    assert cancelled["cancel"]["requested_by"]["name"] == "on-call"
    assert cancelled["cancel"]["on_behalf_of"] == "alice"
    assert retargeted == 409  # nothing was sent: no one to follow up
    log = (await api.get("/v1/operator-log", params={"campaign_id": created})).json()["items"]
    assert [(e["action"], e["actor"]["name"], e["outcome"]) for e in reversed(log)] == [
        ("campaign.create", "marketing", "done"), ("campaign.cancel", "on-call", "done"),
        ("campaign.retarget", "marketing", "rejected")]
    assert log[-1]["on_behalf_of"] == "the CEO" and log[-1]["address"]
    by_lead = (await api.get("/v1/operator-log",
                             params={"actor": cancelled["cancel"]["requested_by"]["id"]})).json()
    assert [e["action"] for e in by_lead["items"]] == ["campaign.cancel"]


async def test_no_secret_is_stored_anywhere(api: httpx.AsyncClient, db: Database,
                                            admin_key: str) -> None:
    minted = [await mint(api, role) for role in Role]
    await api.post("/v1/campaigns", json=CAMPAIGN_BODY)
    stored = b""
    for name in await db.list_collection_names():
        async for document in db[name].find():
            stored += repr(document).encode()
    for token in [*minted, admin_key]:
        assert token.encode() not in stored
        secret = token.split("_", 2)[2]  # hrld_<id>_<secret>; the secret may hold "_" itself
        assert secret.encode() not in stored


async def test_keys_are_listed_without_secrets(api: httpx.AsyncClient) -> None:
    secret = await mint(api, Role.INGEST, "app backend")
    listed = (await api.get("/v1/api-keys")).json()["items"]
    assert secret not in str(listed)
    backend = next(key for key in listed if key["name"] == "app backend")
    assert backend["role"] == "ingest" and secret.startswith(backend["prefix"] + "_")
    assert backend["created_by"]["name"] == "bootstrap" and backend["revoked_at"] is None


async def test_a_key_belongs_to_the_person_named_or_to_its_minter_s(
        api: httpx.AsyncClient, api_app: FastAPI, db: Database) -> None:
    named = await mint(api, Role.OPERATOR, "dana's laptop", owner="dana@example.com")
    spare = await mint(api, Role.ADMIN, "spare admin")
    listed = {key["name"]: key for key in (await api.get("/v1/api-keys")).json()["items"]}
    assert listed["dana's laptop"]["owner"] == "dana@example.com"
    assert listed["spare admin"]["owner"] == listed["bootstrap"]["owner"] == "bootstrap"
    async with client_of(api_app, spare) as client:
        assert (await client.get("/v1/me")).json()["owner"] == "bootstrap"
        minted = await client.post("/v1/api-keys", json={"name": "by spare", "role": "viewer"})
    assert minted.json()["owner"] == "bootstrap"  # a key minted for nobody is its minter's
    async with client_of(api_app, named) as client:
        me = (await client.get("/v1/me")).json()
        made = await client.post("/v1/campaigns", json=CAMPAIGN_BODY)
    assert me["owner"] == "dana@example.com"
    view = (await api.get(f"/v1/campaigns/{made.json()['id']}")).json()
    assert view["created_by"]["owner"] == "dana@example.com"
    log = (await api.get("/v1/operator-log")).json()["items"]
    assert any(e["action"] == "key.create" and e["detail"] == "owner=dana@example.com "
               "role=operator" for e in log)
    before = await db[names.API_KEYS].count_documents({})
    for owner in ("", "a b", "x" * 101, "\u202eevil", "-leading"):
        refused = await api.post("/v1/api-keys", json={"name": "n", "role": "viewer",
                                                       "owner": owner})
        assert refused.status_code == 422, owner
    assert await db[names.API_KEYS].count_documents({}) == before


async def test_a_key_minted_before_owners_existed_is_a_person_of_its_own(
        api: httpx.AsyncClient, db: Database) -> None:
    """The migration: nothing to run; a stored key without ``owner`` is owned by its own id."""
    await mint(api, Role.OPERATOR, "old key", owner="someone")
    await db[names.API_KEYS].update_one({"name": "old key"}, {"$unset": {"owner": ""}})
    listed = {key["name"]: key for key in (await api.get("/v1/api-keys")).json()["items"]}
    assert listed["old key"]["owner"] == listed["old key"]["id"]


async def test_an_idempotency_key_is_scoped_to_the_api_key_that_used_it(
        api: httpx.AsyncClient, api_app: FastAPI) -> None:
    other = await mint(api, Role.OPERATOR)
    headers = {"Idempotency-Key": "launch-2026"}
    first = await api.post("/v1/campaigns", json=CAMPAIGN_BODY, headers=headers)
    replayed = await api.post("/v1/campaigns", json=CAMPAIGN_BODY, headers=headers)
    async with client_of(api_app, other) as client:
        theirs = await client.post("/v1/campaigns", json=CAMPAIGN_BODY, headers=headers)
    assert replayed.json()["id"] == first.json()["id"]
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]


async def test_the_bootstrap_key_is_made_once_whatever_the_number_of_replicas(
        api_app: FastAPI, db: Database, admin_key: str) -> None:
    keys = api_app.state.services.stores.api_keys
    await ensure_bootstrap_key(keys, admin_key)  # a second replica starting
    assert await db[names.API_KEYS].count_documents({"name": "bootstrap"}) == 1


# --- abuse limits ----------------------------------------------------------------------------------
async def test_a_body_over_the_limit_is_refused_with_413(api: httpx.AsyncClient,
                                                         db: Database) -> None:
    huge = {"devices": [{"token": f"t{i}-" + "x" * 4000, "platform": "ios"}
                        for i in range(5000)]}  # about 20 MB
    response = await api.post("/v1/devices/bulk", json=huge)
    assert (response.status_code, error_code(response)) == (413, "request_too_large")
    assert await db[names.DEVICES].count_documents({}) == 0


@pytest.fixture
async def strict_app(broker_settings: Settings, db: Database, redis: Any,
                     admin_key: str) -> AsyncIterator[FastAPI]:
    """An api whose keys may make 2 mutating requests, then 1 a second."""
    app = create_app(broker_settings.model_copy(update={
        "bootstrap_api_key": SecretStr(admin_key), "api_rate_per_s": 1.0, "api_burst": 2}))
    async with app.router.lifespan_context(app):
        yield app


async def test_a_key_over_its_rate_gets_429_with_retry_after_but_may_still_cancel(
        strict_app: FastAPI, admin_key: str) -> None:
    stores = strict_app.state.services.stores
    running = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(running)
    async with client_of(strict_app, admin_key) as client:
        answers = [await client.post("/v1/devices", json={"token": f"t{i}", "platform": "ios"})
                   for i in range(3)]
        reads = await client.get("/v1/campaigns")
        cancel = await client.post(f"/v1/campaigns/{running.id}/cancel")
    assert [a.status_code for a in answers[:2]] == [201, 201]
    assert (answers[2].status_code, error_code(answers[2])) == (429, "rate_limited")
    assert int(answers[2].headers["Retry-After"]) >= 1
    assert reads.status_code == 200 and cancel.status_code in (200, 202)
