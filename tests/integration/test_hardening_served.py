"""Issue 21, access hardening, on the api served by uvicorn in this process, configured exactly as
``python -m services.api`` configures it (``uvicorn_config``): event streams (capped per key,
ended by the key's revocation or expiry), forwarded headers and the address it listens on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from devstack.processes import free_port
from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.status import Status
from herald.settings import Settings
from services.api.__main__ import uvicorn_config
from services.api.app import create_app
from tests.factories import CAMPAIGN_BODY, campaign
from tests.support import error_code, eventually

STREAM_END_DEADLINE_S = 5.0


@contextlib.asynccontextmanager
async def served(settings: Settings, **updates: Any) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """The api on a free port of 127.0.0.1's host, as its entrypoint configures uvicorn."""
    settings = settings.model_copy(update={"api_port": free_port(), **updates})
    server = uvicorn.Server(uvicorn_config(create_app(settings), settings))
    serving = asyncio.create_task(server.serve())
    await eventually(lambda: _started(server, serving), timeout_s=30, what="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{settings.api_port}", server
    finally:
        server.should_exit = True
        await serving


async def _started(server: uvicorn.Server, serving: asyncio.Task[None]) -> bool:
    if serving.done():
        serving.result()  # raise what stopped it
    return server.started


@pytest.fixture
def api_settings(broker_settings: Settings, db: Database, redis: Any,
                 admin_key: str) -> Settings:
    return broker_settings.model_copy(update={"bootstrap_api_key": SecretStr(admin_key)})


def client(base_url: str, key: str, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=20,
                             headers={"Authorization": f"Bearer {key}", **headers})


async def mint(base_url: str, admin_key: str, role: str, **fields: Any) -> tuple[str, str]:
    async with client(base_url, admin_key) as admin:
        response = await admin.post("/v1/api-keys", json={"name": f"t-{role}", "role": role,
                                                          **fields})
    assert response.status_code == 201, response.text
    return str(response.json()["secret"]), str(response.json()["id"])


async def running_campaign(api_settings: Settings, db: Database) -> str:
    """A campaign that stays in progress: its stream never ends by itself."""
    from herald.runtime.stores import mongo_stores
    record = campaign(status=Status.IN_PROGRESS)
    await mongo_stores(db).campaigns.insert(record)
    return record.id


async def first_event_then_wait_for_the_end(http: httpx.AsyncClient, campaign_id: str,
                                            opened: asyncio.Event) -> float:
    """Read the stream: the monotonic time at which it ended."""
    async with http.stream("GET", f"/v1/campaigns/{campaign_id}/events") as stream:
        assert stream.status_code == 200
        async for line in stream.aiter_lines():
            if line.startswith("event: campaign"):
                opened.set()
    return time.monotonic()


# --- finding 7: an open stream outlived its key -------------------------------------------------
async def test_an_event_stream_ends_within_5_s_of_its_key_being_revoked(
        api_settings: Settings, db: Database, admin_key: str) -> None:
    campaign_id = await running_campaign(api_settings, db)
    async with served(api_settings) as (url, _):
        viewer, viewer_id = await mint(url, admin_key, "viewer")
        opened = asyncio.Event()
        async with client(url, viewer) as watcher:
            ended = asyncio.create_task(first_event_then_wait_for_the_end(watcher, campaign_id,
                                                                          opened))
            await asyncio.wait_for(opened.wait(), 10)
            async with client(url, admin_key) as admin:
                assert (await admin.delete(f"/v1/api-keys/{viewer_id}")).status_code == 200
            revoked_at = time.monotonic()
            ended_at = await asyncio.wait_for(ended, 3 * STREAM_END_DEADLINE_S)
    assert ended_at - revoked_at <= STREAM_END_DEADLINE_S


async def test_an_event_stream_ends_within_5_s_of_its_key_expiring(
        api_settings: Settings, db: Database, admin_key: str) -> None:
    campaign_id = await running_campaign(api_settings, db)
    expires = utcnow() + timedelta(seconds=3)
    async with served(api_settings) as (url, _):
        viewer, _ = await mint(url, admin_key, "viewer", expires_at=expires.isoformat())
        opened = asyncio.Event()
        async with client(url, viewer) as watcher:
            ended_at = await asyncio.wait_for(
                first_event_then_wait_for_the_end(watcher, campaign_id, opened),
                3 + 3 * STREAM_END_DEADLINE_S)
    assert opened.is_set()
    seconds_after_expiry = ended_at - time.monotonic() + (utcnow() - expires).total_seconds()
    assert seconds_after_expiry <= STREAM_END_DEADLINE_S


# --- finding 5: one viewer held 300 event streams open ------------------------------------------
async def test_event_streams_are_capped_per_key(api_settings: Settings, db: Database,
                                                admin_key: str) -> None:
    campaign_id = await running_campaign(api_settings, db)
    async with served(api_settings, api_streams_per_key=2) as (url, _):
        viewer, _ = await mint(url, admin_key, "viewer")
        other, _ = await mint(url, admin_key, "viewer")
        async with client(url, viewer) as watcher, client(url, other) as colleague:
            openings = [asyncio.Event(), asyncio.Event()]
            streams = [asyncio.create_task(first_event_then_wait_for_the_end(
                watcher, campaign_id, opened)) for opened in openings]
            await asyncio.wait_for(asyncio.gather(*(o.wait() for o in openings)), 10)
            async with watcher.stream("GET", f"/v1/campaigns/{campaign_id}/events") as third:
                assert third.status_code == 429  # before reading a body that would never end
                await third.aread()
            assert error_code(third) == "too_many_streams"
            assert int(third.headers["Retry-After"]) >= 1
            async with colleague.stream("GET", f"/v1/campaigns/{campaign_id}/events") as theirs:
                assert theirs.status_code == 200  # the cap is per key
            streams[0].cancel()  # the watcher closes one
            with contextlib.suppress(asyncio.CancelledError):
                await streams[0]

            async def reopened() -> bool:
                async with watcher.stream("GET",
                                          f"/v1/campaigns/{campaign_id}/events") as again:
                    return again.status_code == 200

            await eventually(reopened, timeout_s=5, what="a closed stream to free its place")
            streams[1].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await streams[1]


# --- finding 9: X-Forwarded-For was trusted from loopback ---------------------------------------
async def logged_address(url: str, admin_key: str) -> str:
    async with client(url, admin_key, **{"X-Forwarded-For": "6.6.6.6"}) as admin:
        assert (await admin.post("/v1/campaigns", json=CAMPAIGN_BODY)).status_code == 202
        entry = (await admin.get("/v1/operator-log")).json()["items"][0]
    assert entry["action"] == "campaign.create"
    return str(entry["address"])


async def test_forwarded_headers_are_ignored_unless_their_proxy_is_named(
        api_settings: Settings, admin_key: str) -> None:
    async with served(api_settings) as (url, _):
        assert await logged_address(url, admin_key) == "127.0.0.1"
    async with served(api_settings, api_forwarded_allow_ips="127.0.0.1") as (url, _):
        assert await logged_address(url, admin_key) == "6.6.6.6"


# --- finding 12: the api listened on every interface --------------------------------------------
async def test_the_api_listens_on_loopback_unless_told_otherwise(api_settings: Settings) -> None:
    async with served(api_settings) as (_, server):
        hosts = {sock.getsockname()[0] for s in server.servers for sock in s.sockets}
    assert hosts == {"127.0.0.1"}
