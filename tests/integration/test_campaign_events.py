"""``GET /v1/campaigns/{id}/events`` over real HTTP (uvicorn in this process, real MongoDB wire
server, RabbitMQ and Redis behind it): events while the counts move, the end at the final
status, a reconnect that starts from the current state, and the refusals of any other read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from devstack.processes import free_port
from herald.domain.access import Role
from herald.domain.documents import Campaign, new_id
from herald.service_layer.ports import CampaignRepository, Stores
from tests.factories import paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code, eventually

EVENT_TIMEOUT_S = 5.0


@pytest.fixture
async def served(api_app: FastAPI, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """The api on a real port (the ASGI transport buffers whole responses, so no stream)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api_app, host="127.0.0.1", port=port,
                                           lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve())
    await eventually(lambda: _started(server), timeout_s=5, what="uvicorn to listen")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                 headers={"Authorization": f"Bearer {admin_key}"}) as client:
        yield client
    server.should_exit = True
    await task


async def _started(server: uvicorn.Server) -> bool:
    return server.started


class EventReader:
    """Reads the server-sent events of one open response, one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any] | None:
        """The next event (its fields, ``data`` parsed), or None once the stream ended."""
        fields: dict[str, Any] = {}
        async for line in self._lines:
            if line == "" and fields:
                return fields
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = orjson.loads(value) if name == "data" else value
        return None


@contextlib.asynccontextmanager
async def events_of(client: httpx.AsyncClient, campaign_id: str) -> AsyncIterator[EventReader]:
    async with client.stream("GET", f"/v1/campaigns/{campaign_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventReader(response)


async def next_event(reader: EventReader) -> dict[str, Any] | None:
    return await asyncio.wait_for(reader.next(), EVENT_TIMEOUT_S)


async def test_events_follow_the_counts_end_at_the_final_status_and_restart_on_reconnect(
        served: httpx.AsyncClient, api_app: FastAPI) -> None:
    stores: Stores = api_app.state.services.stores
    campaign_id = await paged_campaign(stores)
    async with events_of(served, campaign_id) as reader:
        first = await next_event(reader)
        assert first is not None and (first["event"], first["id"]) == ("campaign", "1")
        assert first["data"] == _streamed(await served.get(f"/v1/campaigns/{campaign_id}"))
        await stores.campaigns.count_finished_chunk(campaign_id, 10, 0, done=True)
        moved = await next_event(reader)
        assert moved is not None and moved["id"] == "2"
        assert moved["data"]["counts"]["sent"] == 10
        async with events_of(served, campaign_id) as again:
            current = await next_event(again)
            assert current is not None and current["id"] == "1"
            assert current["data"]["counts"] == moved["data"]["counts"]
        assert (await served.post(f"/v1/campaigns/{campaign_id}/cancel")).status_code == 202
        last = await _until_final(reader)
        assert last["data"] == _streamed(await served.get(f"/v1/campaigns/{campaign_id}"))
        assert (last["data"]["status"], last["data"]["counts"]) == (
            "cancelled", {"targeted": 30, "sent": 12, "failed": 1, "unsent": 17,
                          "maybe_delivered": 0, "suppressed": 0})
        assert await next_event(reader) is None  # the server closed the stream


async def _until_final(reader: EventReader) -> dict[str, Any]:
    while (event := await next_event(reader)) is not None:
        if event["data"]["status"] == "cancelled":
            return event
    raise AssertionError("the stream ended before the final status")


async def test_a_finished_campaign_streams_one_event_and_ends(
        served: httpx.AsyncClient, api_app: FastAPI) -> None:
    stores: Stores = api_app.state.services.stores
    campaign_id = await paged_campaign(stores)
    assert (await served.post(f"/v1/campaigns/{campaign_id}/cancel")).status_code == 202

    async def cancelled() -> bool:
        return bool((await served.get(f"/v1/campaigns/{campaign_id}")).json()["status"]
                    == "cancelled")

    await eventually(cancelled, timeout_s=5, what="the cancel to finish")
    async with events_of(served, campaign_id) as reader:
        only = await next_event(reader)
        assert only is not None and only["data"]["status"] == "cancelled"
        assert await next_event(reader) is None


async def test_the_stream_is_refused_like_any_read(api: httpx.AsyncClient,
                                                   api_app: FastAPI) -> None:
    campaign_id = await paged_campaign(api_app.state.services.stores)
    ingest = await mint(api, Role.INGEST)
    async with client_of(api_app, None) as anonymous, client_of(api_app, ingest) as devices:
        unauthenticated = await anonymous.get(f"/v1/campaigns/{campaign_id}/events")
        forbidden = await devices.get(f"/v1/campaigns/{campaign_id}/events")
    unknown = await api.get(f"/v1/campaigns/{new_id()}/events")
    assert (unauthenticated.status_code, error_code(unauthenticated)) == (401, "unauthenticated")
    assert (forbidden.status_code, error_code(forbidden)) == (403, "forbidden")
    assert (unknown.status_code, error_code(unknown)) == (404, "campaign_not_found")


class CountedReads:
    """The campaign repository, counting the ``get`` calls the events stream polls with."""

    def __init__(self, inner: CampaignRepository) -> None:
        self._inner = inner
        self.gets = 0

    async def get(self, campaign_id: str) -> Campaign | None:
        self.gets += 1
        return await self._inner.get(campaign_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_client_that_goes_away_ends_its_stream(served: httpx.AsyncClient,
                                                       api_app: FastAPI) -> None:
    services = api_app.state.services
    campaign_id = await paged_campaign(services.stores)
    reads = CountedReads(services.stores.campaigns)
    api_app.state.services = replace(services, stores=replace(services.stores, campaigns=reads))
    try:
        async with events_of(served, campaign_id) as reader:
            assert await next_event(reader) is not None
            polled = reads.gets
            await eventually(lambda: _more(reads, polled + 2), timeout_s=5,
                             what="the stream to poll while its client listens")
        left_at = reads.gets
        # Proving an absence takes a window: a listening client would see 4 polls in it.
        await asyncio.sleep(1.0)
        assert reads.gets <= left_at + 1
    finally:
        api_app.state.services = services


async def _more(reads: CountedReads, at_least: int) -> bool:
    return reads.gets >= at_least


def _streamed(got: httpx.Response) -> dict[str, Any]:
    """The GET of a campaign as its event stream carries it: without the forecast (``eta`` is
    computed for a single GET only, not for every event)."""
    return {**got.json(), "eta": None}
