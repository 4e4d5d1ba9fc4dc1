"""Issue 21, access hardening, on the in-process api (real MongoDB wire server, RabbitMQ and Redis
behind it): what a red team found, each tried again the way it was found.

Revocation of the bootstrap key survives a restart; failed authentications are throttled per
address; no body is read before the key is checked; every call spends from its key's budget
(reads, refusals), cancels from a budget of their own; refusals are aggregated in the operator
log; the CSV audit neutralises formulas; an impossible cron is a 422; no exception text reaches
the operator log.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.access import Role, new_token
from herald.domain.messages import Recipient
from herald.domain.status import Status
from herald.settings import Settings
from services.api.app import create_app
from tests.factories import CAMPAIGN_BODY, campaign, paged
from tests.integration.helpers import client_of
from tests.support import error_code


@contextlib.asynccontextmanager
async def running_api(settings: Settings, **updates: Any) -> AsyncIterator[FastAPI]:
    """The api in this process with ``updates`` to its settings, its lifespan run."""
    app = create_app(settings.model_copy(update=updates))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
def api_settings(broker_settings: Settings, db: Database, redis: Any,
                 admin_key: str) -> Settings:
    return broker_settings.model_copy(update={"bootstrap_api_key": SecretStr(admin_key)})


async def mint(client: httpx.AsyncClient, role: Role, name: str) -> str:
    response = await client.post("/v1/api-keys", json={"name": name, "role": role.value})
    assert response.status_code == 201, response.text
    return str(response.json()["secret"])


async def key_record(client: httpx.AsyncClient, key_id: str) -> dict[str, Any]:
    listed = (await client.get("/v1/api-keys")).json()["items"]
    return next(key for key in listed if key["id"] == key_id)


# --- finding 1: a revoked bootstrap key came back at the next start ------------------------------
async def test_a_revoked_bootstrap_key_stays_revoked_when_the_api_starts_again(
        api_settings: Settings, admin_key: str) -> None:
    async with running_api(api_settings) as app, client_of(app, admin_key) as bootstrap:
        second_admin = await mint(bootstrap, Role.ADMIN, "second admin")
        bootstrap_id = (await bootstrap.get("/v1/me")).json()["id"]
        async with client_of(app, second_admin) as admin:
            assert (await admin.delete(f"/v1/api-keys/{bootstrap_id}")).status_code == 200
    async with (running_api(api_settings) as app,  # a restart, a rollout
                client_of(app, admin_key) as leaked, client_of(app, second_admin) as admin):
        assert (await leaked.get("/v1/me")).status_code == 401
        assert (await key_record(admin, bootstrap_id))["revoked_at"] is not None


async def test_a_new_bootstrap_secret_is_the_way_back_in_and_retires_the_old_one(
        api_settings: Settings, admin_key: str) -> None:
    async with running_api(api_settings) as app, client_of(app, admin_key) as first:
        assert (await first.get("/v1/me")).status_code == 200
    rotated = new_token("bootstrap")
    async with (running_api(api_settings, bootstrap_api_key=SecretStr(rotated)) as app,
                client_of(app, rotated) as new, client_of(app, admin_key) as old):
        assert (await new.get("/v1/me")).json()["role"] == "admin"
        assert (await old.get("/v1/me")).status_code == 401
    async with (running_api(api_settings) as app,  # the old secret configured again
                client_of(app, admin_key) as old, client_of(app, rotated) as new):
        assert (await old.get("/v1/me")).status_code == 401
        assert (await new.get("/v1/me")).status_code == 200


# --- finding 2: failed authentications were not throttled ----------------------------------------
async def test_failed_authentications_are_throttled_per_address_with_429_and_retry_after(
        api_settings: Settings, admin_key: str) -> None:
    async with running_api(api_settings, api_auth_failures_per_min=6,
                           api_auth_failure_burst=5) as app:
        async with client_of(app, "hrld_nope_" + "x" * 43) as guesser:
            codes = [(await guesser.get("/v1/campaigns")).status_code for _ in range(8)]
        async with client_of(app, admin_key) as same_address:
            blocked = await same_address.get("/v1/me")
        elsewhere = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=("10.1.2.3", 40000)),
            base_url="http://herald", headers={"Authorization": f"Bearer {admin_key}"})
        async with elsewhere:
            other_address = await elsewhere.get("/v1/me")
    assert codes == [401] * 5 + [429] * 3
    assert (blocked.status_code, error_code(blocked)) == (429, "too_many_failed_authentications")
    assert int(blocked.headers["Retry-After"]) >= 1
    assert other_address.status_code == 200


# --- finding 4: the body was parsed before the key was checked -----------------------------------
async def test_a_request_without_a_valid_key_is_answered_before_its_body_is_read(
        api_app: FastAPI) -> None:
    for authorization in (None, b"Bearer hrld_nope_nope"):
        received: list[str] = []
        sent: list[dict[str, Any]] = []

        async def receive(received: list[str] = received) -> dict[str, Any]:
            received.append("body")
            return {"type": "http.request", "body": b'{"devices": []}', "more_body": False}

        async def send(message: dict[str, Any], sent: list[dict[str, Any]] = sent) -> None:
            sent.append(message)

        headers = [(b"host", b"herald"), (b"content-type", b"application/json"),
                   (b"content-length", b"16000000")]
        if authorization:
            headers.append((b"authorization", authorization))
        await api_app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                       "method": "POST", "scheme": "http", "path": "/v1/devices/bulk",
                       "raw_path": b"/v1/devices/bulk", "query_string": b"", "root_path": "",
                       "headers": headers, "client": ("127.0.0.1", 5000),
                       "server": ("herald", 80), "state": {}}, receive, send)
        assert sent[0]["status"] == 401
        assert received == [], "the body was read before the key was checked"


# --- finding 5: only successful writes were rate-limited -----------------------------------------
async def test_reads_and_refused_calls_spend_from_the_key_budget(
        api_settings: Settings, admin_key: str) -> None:
    async with running_api(api_settings, api_read_rate_per_s=0.5, api_read_burst=3,
                           api_rate_per_s=0.5, api_burst=3) as app:
        async with client_of(app, admin_key) as admin:
            viewer = await mint(admin, Role.VIEWER, "reader")
        async with client_of(app, viewer) as client:
            reads = [(await client.get("/v1/campaigns")).status_code for _ in range(4)]
            refused = [(await client.post("/v1/campaigns", json=CAMPAIGN_BODY)).status_code
                       for _ in range(4)]
            over = await client.get("/v1/pods")
    assert reads == [200, 200, 200, 429]
    assert refused == [403, 403, 403, 429]
    assert (over.status_code, error_code(over)) == (429, "rate_limited")
    assert int(over.headers["Retry-After"]) >= 1


async def test_a_responder_over_every_other_budget_may_still_cancel(
        api_settings: Settings, admin_key: str) -> None:
    async with running_api(api_settings, api_read_rate_per_s=0.1, api_read_burst=1,
                           api_rate_per_s=0.1, api_burst=1) as app:
        running = campaign(status=Status.IN_PROGRESS)
        await app.state.services.stores.campaigns.insert(running)
        async with client_of(app, admin_key) as admin:
            responder = await mint(admin, Role.RESPONDER, "on-call")
        async with client_of(app, responder) as lead:
            spent = [(await lead.get("/v1/campaigns")).status_code for _ in range(3)]
            spent += [(await lead.post("/v1/campaigns", json=CAMPAIGN_BODY)).status_code
                      for _ in range(3)]
            stopped = await lead.post(f"/v1/campaigns/{running.id}/cancel")
    assert 429 in spent[:3] and 429 in spent[3:]
    assert stopped.status_code in (200, 202), stopped.text


async def test_cancels_spend_from_a_budget_of_their_own(api_settings: Settings,
                                                        admin_key: str) -> None:
    async with (running_api(api_settings, api_cancel_rate_per_s=0.1, api_cancel_burst=3) as app,
                client_of(app, admin_key) as admin):
        unknown = [(await admin.post(f"/v1/campaigns/{'a' * 24}/cancel")).status_code
                   for _ in range(4)]
        reads = await admin.get("/v1/campaigns")
    assert unknown == [404, 404, 404, 429]
    assert reads.status_code == 200


async def test_refused_calls_are_aggregated_in_the_operator_log(api_settings: Settings,
                                                               admin_key: str) -> None:
    async with (running_api(api_settings, api_cancel_burst=100) as app,
                client_of(app, admin_key) as admin):
        viewer = await mint(admin, Role.VIEWER, "curious")
        responder = await mint(admin, Role.RESPONDER, "typo")
        async with client_of(app, viewer) as curious, client_of(app, responder) as typo:
            for _ in range(40):
                assert (await curious.post("/v1/campaigns", json=CAMPAIGN_BODY)).status_code == 403
                assert (await typo.post(f"/v1/campaigns/{'b' * 24}/cancel")).status_code == 404
        log = (await admin.get("/v1/operator-log", params={"limit": 500})).json()["items"]
    for action, name in (("campaign.create", "curious"), ("campaign.cancel", "typo")):
        entries = [e for e in log if e["action"] == action and e["actor"]["name"] == name]
        assert 1 <= len(entries) <= 2, entries  # one per key, action, status and minute
        assert sum(e["count"] for e in entries) == 40


# --- finding 6: formulas in the CSV audit ----------------------------------------------------------
FORMULAS = ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]


async def test_csv_cells_a_spreadsheet_would_read_as_formulas_are_neutralised(
        api: httpx.AsyncClient, api_app: FastAPI) -> None:
    stores = api_app.state.services.stores
    record = campaign(**paged(1, len(FORMULAS)))
    await stores.campaigns.insert(record)
    await stores.chunks.create(record.id, 0, [
        Recipient(token=f"{formula}tok{i}", user_id=formula) for i, formula in enumerate(FORMULAS)
    ], None, utcnow())
    url = f"/v1/campaigns/{record.id}/recipients"
    csv_text = (await api.get(url, params={"outcome": "unsent", "format": "csv"})).text
    rows = list(csv.reader(io.StringIO(csv_text, newline="")))[1:]
    assert [row[0] for row in rows] == [f"'{formula}tok{i}" for i, formula in enumerate(FORMULAS)]
    assert [row[1] for row in rows] == [f"'{formula}" for formula in FORMULAS]
    exact = (await api.get(url, params={"outcome": "unsent"})).text.splitlines()
    assert [orjson.loads(line)["user_id"] for line in exact] == FORMULAS


# --- finding 10: an impossible cron answered 500 -------------------------------------------------
async def test_an_impossible_cron_is_a_422_and_changes_nothing(api: httpx.AsyncClient) -> None:
    body = {"template": CAMPAIGN_BODY, "cron": "0 0 30 2 *", "timezone": "UTC"}
    created = await api.post("/v1/schedules", json=body)
    assert (created.status_code, error_code(created)) == (422, "validation_error")
    schedule_id = (await api.post("/v1/schedules", json={**body, "cron": "0 9 * * *"})).json()["id"]
    edited = await api.patch(f"/v1/schedules/{schedule_id}", json={"cron": "0 0 31 4 *"})
    assert (edited.status_code, error_code(edited)) == (422, "validation_error")
    assert (await api.get(f"/v1/schedules/{schedule_id}")).json()["cron"] == "0 9 * * *"


async def test_no_exception_text_reaches_the_operator_log(
        api: httpx.AsyncClient, api_app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("mongodb://herald:s3cret@db.internal:27017 went away")

    monkeypatch.setattr(api_app.state.services.creator, "create", broken)
    answering = httpx.AsyncClient(  # the 500 as a client gets it, not the exception
        transport=httpx.ASGITransport(app=api_app, raise_app_exceptions=False),
        base_url="http://herald", headers=api.headers)
    async with answering:
        failed = await answering.post("/v1/campaigns", json=CAMPAIGN_BODY)
    assert (failed.status_code, error_code(failed)) == (500, "internal_error")
    assert "s3cret" not in failed.text
    assert (await api.post("/v1/schedules", json={
        "template": CAMPAIGN_BODY, "cron": "0 0 30 2 *", "timezone": "UTC"})).status_code == 422
    log = (await api.get("/v1/operator-log")).json()["items"]
    details = [entry["detail"] or "" for entry in log]
    assert log and not any("s3cret" in d or "db.internal" in d or "next date" in d
                           for d in details), details


# --- finding 12: /docs loaded Swagger UI from a CDN on the console's origin ----------------------
async def test_the_docs_page_loads_nothing_from_another_origin(api_app: FastAPI) -> None:
    async with client_of(api_app, None) as anonymous:
        page = await anonymous.get("/docs")
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        fetched = [await anonymous.get(asset) for asset in assets]
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert assets and all(asset.startswith("/docs/assets/") for asset in assets), assets
    assert all(response.status_code == 200 for response in fetched)
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self' 'sha256-" in policy
    assert "http" not in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
