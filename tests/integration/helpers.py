"""Helpers of the integration tests: a client of the in-process api, a key minted through it, a
vhost's name from its URL. Fixtures (``conftest.py``) and test modules import them from here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from fastapi import FastAPI
from pydantic import SecretStr

from herald.adapters.redis import RedisCancelFlags, RedisPodRegistry
from herald.clock import utcnow
from herald.domain.access import Role
from herald.domain.documents import Campaign, CampaignCounts, Dispatch, Progress
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.service_layer.ports import Stores
from herald.service_layer.stopping import Decider, Settler
from herald.settings import Settings
from services.api.app import create_app
from tests.factories import at, campaign, recipients_of


def client_of(app: FastAPI, key: str | None) -> httpx.AsyncClient:
    """A client of the in-process ``app`` that carries ``key`` (none: no Authorization)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://herald",
                             headers=headers)


def vhost_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


async def mint(api: httpx.AsyncClient, role: Role | str, name: str | None = None,
               **fields: Any) -> str:
    response = await api.post("/v1/api-keys",
                              json={"name": name or f"test-{role}", "role": str(role), **fields})
    assert response.status_code == 201, response.text
    return str(response.json()["secret"])


async def last_chunk_pending(stores: Stores) -> str:
    """A campaign with two chunks: the first finished and counted, the last recorded but open."""
    record = campaign(status=Status.IN_PROGRESS, dispatch=Dispatch(owner="d", done=True, next_seq=2),
                      progress=Progress(chunks_published=2, chunks_done=1),
                      counts=CampaignCounts(targeted=4, sent=2))
    await stores.campaigns.insert(record)
    campaign_id, now = record.id, utcnow()
    for seq in (0, 1):
        await stores.chunks.create(campaign_id, seq, recipients_of(f"t{seq}{i}" for i in range(2)),
                                   None, now)
        await stores.deliveries.record(campaign_id, seq, "s", at([(0, None), (1, None)]), now)
    return campaign_id


class Stopping:
    """The decider and the settler of one pod on the real stores (no bus: the tests deliver
    nothing; pods are registered in Redis by the tests that need them)."""

    def __init__(self, stores: Stores, redis: Any, settings: Settings,
                 pod_id: str = "test-pod") -> None:
        keys = RedisKeys(settings.mongodb_database)
        self.stores = stores
        self.registry = RedisPodRegistry(redis, keys, 5)
        self.settler = Settler(stores, self.registry, pod_id)
        self.decider = Decider(stores, RedisCancelFlags(redis, keys, 60), self.registry, None,
                               self.settler.settle)

    async def finish(self, campaign_id: str) -> Campaign | None:
        return await self.settler.settle(campaign_id)

    async def chunk_finished(self, campaign_id: str, sent: int, failed: int, *,
                             done: bool) -> Campaign | None:
        """What a sender's close reports: the chunk counted, then its campaign settled."""
        counted = await self.stores.campaigns.count_finished_chunk(campaign_id, sent, failed,
                                                                   done=done)
        return None if not done or counted is None else await self.settler.settled(counted)

    async def reconcile(self, campaign: Campaign) -> Campaign | None:
        """The sweep's report of a campaign paged and still open."""
        return await self.settler.settled(campaign, count_closed=True)


@asynccontextmanager
async def api_with(settings: Settings, admin_key: str, **changes: Any
                   ) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An in-process api with ``settings`` changed by ``changes`` (``admin_key`` its bootstrap
    key), running, and its admin's client."""
    app = create_app(settings.model_copy(update={
        "bootstrap_api_key": SecretStr(admin_key), **changes}))
    async with app.router.lifespan_context(app), client_of(app, admin_key) as client:
        yield app, client


async def everything(admin: httpx.AsyncClient) -> tuple[list[str], list[str]]:
    """The ids of every campaign and schedule: what a refused call must leave as it was."""
    campaigns = (await admin.get("/v1/campaigns")).json()["items"]
    schedules = (await admin.get("/v1/schedules")).json()["items"]
    return [c["id"] for c in campaigns], [s["id"] for s in schedules]
