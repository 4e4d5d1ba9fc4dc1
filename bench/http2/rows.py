"""What each row of ``bench.http2`` sends with. Every row sends Herald's own request (the body
``MessageTemplate`` encodes, ``Content-Type`` and a bearer token) from ``--concurrency`` workers
at most, back to back, until a deadline.

- ``aiohttp-*``: Herald's ``FcmClient`` over ``open_session`` unchanged, as ``bench.transport``'s
  ``herald-fcm-client`` row (HTTP/1.1, one connection per request in flight). Over TLS it trusts
  the stand-in's certificate through ``SSL_CERT_FILE``, as it would trust a company CA, so the
  session is exactly the one Herald opens.
- ``httpx-h2-*``: ``httpx.AsyncClient(http2=True)`` (the ``h2`` package; firebase-admin's
  transport). httpcore queues every request on the first HTTP/2 connection it opens, whatever
  ``max_connections`` says (its pool counts a connection with streams left as available, and
  waits on the stream limit inside it), so N connections are N clients of one connection each,
  the workers spread over them; ``httpx-h2-pool`` is one client with its pool left to
  do it, to show that.
- ``niquests-h2``: ``niquests.AsyncSession(multiplexed=True)`` with a pool of N connections
  (urllib3-future spreads the streams over them itself).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from bench.fcm_sdk import STATIC_ACCESS_TOKEN
from bench.transport.records import BenchError
from bench.transport.records import Plan as TransportPlan
from bench.transport.rows import (
    BODY,
    DATA,
    PROJECT,
    REPLACE_KEY,
    TITLE,
    HeraldClient,
    Transport,
    run_workers,
)
from herald.domain.payload import MessageTemplate, build_payload
from herald.settings import Settings

HTTP2 = "HTTP/2"
REDIS_URL = Settings.model_fields["redis_url"].default
"""Required by Herald's settings; the FCM client never uses it."""
NIQUESTS_MISSING = (
    "niquests is not installed. It is left out of the dev extra: its dependency urllib3-future "
    "ships a package named urllib3 of its own (and a .pth start-up hook that puts it back) which "
    "replaces the real urllib3 under requests and google-auth. To run its row, install it "
    "aside: `.venv/bin/uv pip install --python .venv/bin/python --target /tmp/niquests niquests "
    "&& rm -rf /tmp/niquests/urllib3 /tmp/niquests/urllib3_future.pth`, then run the bench with "
    "PYTHONPATH=/tmp/niquests (niquests finds urllib3_future on its own).")


@dataclass(frozen=True)
class Plan:
    """Everything a row's process needs (picklable)."""

    row: str
    endpoint: str
    cafile: str | None
    seconds: float
    warmup_s: float
    concurrency: int
    max_streams: int
    server_port: int
    server_pid: int
    cpu: int | None
    server_cpu: int | None

    def in_flight(self, connections: int | None) -> int:
        """Requests in flight: ``--concurrency``, or as many streams as ``connections`` allow."""
        if connections is None:
            return self.concurrency
        return min(self.concurrency, connections * self.max_streams)


def herald_fcm_client(plan: Plan) -> Transport:
    return HeraldClient(TransportPlan(plan.row, plan.endpoint, plan.seconds, plan.warmup_s,
                                      plan.concurrency, REDIS_URL, plan.server_pid,
                                      plan.cpu, plan.server_cpu))


class _Http2Row:
    """Herald's request over some HTTP/2 client; subclasses say how a request is made."""

    def __init__(self, plan: Plan, in_flight: int) -> None:
        self._url = f"{plan.endpoint}/v1/projects/{PROJECT}/messages:send"
        self._headers = {"Content-Type": "application/json",
                         "Authorization": f"Bearer {STATIC_ACCESS_TOKEN}"}
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA, replace_key=REPLACE_KEY))
        self._in_flight = in_flight
        self._context = ssl.create_default_context(cafile=plan.cafile)


class HttpxConnections(_Http2Row):
    """``connections`` httpx clients of one HTTP/2 connection each, the workers spread evenly;
    or, ``pooled``, one client whose pool may hold ``--concurrency`` connections, as an
    application would configure it (the stand-in's count shows how many it opens)."""

    def __init__(self, plan: Plan, connections: int = 1, pooled: bool = False) -> None:
        super().__init__(plan, plan.concurrency if pooled else plan.in_flight(connections))
        if pooled:
            self._clients = [self._client(plan.concurrency)]
        else:
            self._clients = [self._client(1) for _ in range(connections)]

    def _client(self, connections: int) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(http2=True, verify=self._context, limits=limits, timeout=10.0)

    async def run(self, deadline: float) -> int:
        shares = [len(range(i, self._in_flight, len(self._clients)))
                  for i in range(len(self._clients))]
        counts = await asyncio.gather(*(
            run_workers(self._sender(client), share, deadline)
            for client, share in zip(self._clients, shares, strict=True)))
        return sum(counts)

    def _sender(self, client: httpx.AsyncClient) -> Callable[[str], Awaitable[bool]]:
        async def send_one(token: str) -> bool:
            response = await client.post(self._url, content=self._template.body_for(token),
                                         headers=self._headers)
            if response.http_version != HTTP2:
                raise BenchError(f"httpx spoke {response.http_version}, not {HTTP2}")
            return response.status_code == 200
        return send_one

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()


class NiquestsMultiplexed(_Http2Row):
    """``niquests.AsyncSession(multiplexed=True)``: a request returns a lazy response, gathered
    by the worker that sent it."""

    def __init__(self, plan: Plan, connections: int) -> None:
        super().__init__(plan, plan.in_flight(connections))
        try:
            import niquests  # optional: see NIQUESTS_MISSING
        except ImportError:
            raise BenchError(NIQUESTS_MISSING) from None
        self._session = niquests.AsyncSession(multiplexed=True, pool_connections=1,
                                              pool_maxsize=connections, disable_http3=True)
        self._cafile = plan.cafile

    async def run(self, deadline: float) -> int:
        return await run_workers(self._send_one, self._in_flight, deadline)

    async def _send_one(self, token: str) -> bool:
        response = await self._session.post(self._url, data=self._template.body_for(token),
                                            headers=self._headers, verify=self._cafile)
        await self._session.gather(response)
        if response.http_version != 20:  # urllib3's encoding of HTTP/2
            raise BenchError(f"niquests spoke {response.http_version}, not HTTP/2")
        return bool(response.status_code == 200)

    async def close(self) -> None:
        await self._session.close()


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    open: Callable[[Plan], Transport]
    tls: bool = True
    http_version: str = "2"
    """What the stand-in must have seen every request arrive as (ASGI's ``http_version``)."""
    connections: int | None = None
    """Connections the client is set up to hold; None: one per request in flight."""
    needs: str | None = None
    """A module the row needs that the dev extra does not install."""


ROWS = {row.name: row for row in (
    Row("aiohttp-plain", "Herald's FcmClient (aiohttp, HTTP/1.1, a connection per request in "
        "flight) to the project's emulator, plaintext: the reference to today's numbers",
        herald_fcm_client, tls=False, http_version="1.1"),
    Row("aiohttp-tls", "the same to the stand-in over TLS (ALPN http/1.1): today's path",
        herald_fcm_client, http_version="1.1"),
    *(Row(f"httpx-h2-{n}conn", f"httpx http2=True, {n} client(s) of one connection, the workers "
          "spread over them", functools.partial(HttpxConnections, connections=n), connections=n)
      for n in (1, 2, 3)),
    Row("httpx-h2-pool", "httpx http2=True, one client, max_connections=--concurrency",
        functools.partial(HttpxConnections, pooled=True)),
    Row("niquests-h2-3conn", "niquests AsyncSession(multiplexed=True), pool of 3 connections",
        functools.partial(NiquestsMultiplexed, connections=3), connections=3, needs="niquests"),
)}
BASELINE = "aiohttp-tls"
"""The ratio column's reference: today's client paying for TLS, as it does against Google."""
