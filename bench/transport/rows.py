"""What each row sends with, and how: the official SDK, bare httpx, Herald's ``FcmClient``, the
earlier lock-step ``BatchSender`` and the sender's ``SendWindow``, each sending the same message
until a deadline.

This is the only module of the bench that imports Herald's sending code, so a move of
``FcmClient`` or ``BatchSender`` is a one-line change here.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from firebase_admin import messaging

from bench.fcm_sdk import STATIC_ACCESS_TOKEN, close_app, open_app
from bench.transport.lockstep import BatchResult, BatchSender
from bench.transport.records import BenchError, Plan
from herald import names
from herald.adapters import redis as herald_redis
from herald.adapters.fcm import FcmClient, open_session
from herald.adapters.rate_limit import TokenBucket
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.payload import (
    MessageTemplate,
    build_payload,
    default_replace_key,
    web_push_topic,
)
from herald.names import RedisKeys
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from herald.settings import Settings

BASELINE = "firebase-admin"
PROJECT = "bench"
TOKEN_LENGTH = 163
"""Length of a real FCM registration token, so request bodies have production size."""
SDK_BATCH = 500
"""The most ``send_each_async`` accepts in one call."""
SENDER_BATCH = Settings.model_fields["sender_batch_size"].default
SENDER_PREFETCH = Settings.model_fields["sender_prefetch"].default
UNTHROTTLED_RATE_PER_S = 1_000_000.0
"""High enough that the Redis bucket grants every batch at once: it costs a round trip, no wait."""

TITLE = "Spring sale"
BODY = "Everything is 20% off until Sunday midnight."
DATA = {"campaignId": "6740d0b2a1f3c9e8d7b6a501", "landingUrl": "https://example.com/sale"}
REPLACE_KEY = default_replace_key("6740d0b2a1f3c9e8d7b6a501")
"""Every Herald message carries its campaign's replacement key; the SDK rows send it too."""


def sdk_replacement() -> dict[str, Any]:
    """The replacement fields of ``build_payload``, as the SDK's platform configs."""
    return {
        "android": messaging.AndroidConfig(
            collapse_key=REPLACE_KEY, notification=messaging.AndroidNotification(tag=REPLACE_KEY)),
        "apns": messaging.APNSConfig(headers={"apns-collapse-id": REPLACE_KEY}),
        "webpush": messaging.WebpushConfig(
            headers={"Topic": web_push_topic(REPLACE_KEY)},
            notification=messaging.WebpushNotification(tag=REPLACE_KEY)),
    }
TOKENS = [f"bench-{i:08d}-".ljust(TOKEN_LENGTH, "x") for i in range(SDK_BATCH)]


class Transport(Protocol):
    async def run(self, deadline: float) -> int:
        """Send until ``time.perf_counter()`` passes ``deadline``; return the messages accepted."""

    async def close(self) -> None: ...


class StaticTokens:
    """Stands in for ``AccessTokens`` (which needs a service-account file): the same
    ``Authorization`` header and the same await per request, so both sides pay for auth."""

    async def header(self) -> str:
        return f"Bearer {STATIC_ACCESS_TOKEN}"


class FirebaseAdmin:
    """The official SDK used as documented: ``messaging.send_each_async`` on batches of 500."""

    def __init__(self, plan: Plan) -> None:
        self._app = open_app(plan.endpoint, PROJECT, "bench")

    async def run(self, deadline: float) -> int:
        sent = 0
        while time.perf_counter() < deadline:
            sent += await self._send_batch()
        return sent

    async def _send_batch(self) -> int:
        """Building the ``Message`` objects is part of the SDK's path, so it is inside the timing."""
        batch = [messaging.Message(token=token, notification=messaging.Notification(TITLE, BODY),
                                   data=DATA, **sdk_replacement()) for token in TOKENS]
        response = await messaging.send_each_async(batch, app=self._app)
        if response.failure_count:
            first = next(r.exception for r in response.responses if not r.success)
            raise BenchError(f"send_each_async: {response.failure_count} failed, first: {first!r}")
        return int(response.success_count)

    async def close(self) -> None:
        await close_app(self._app)


class RawHttpx:
    """httpx on its own (HTTP/1.1, one pooled connection per worker): the SDK's transport
    without the SDK, to tell the library's cost from the SDK's."""

    def __init__(self, plan: Plan) -> None:
        limits = httpx.Limits(max_connections=plan.concurrency,
                              max_keepalive_connections=plan.concurrency)
        self._client = httpx.AsyncClient(limits=limits, timeout=10.0)
        self._url = f"{plan.endpoint}/v1/projects/{PROJECT}/messages:send"
        self._headers = {"Content-Type": "application/json",
                         "Authorization": f"Bearer {STATIC_ACCESS_TOKEN}"}
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA, replace_key=REPLACE_KEY))
        self._concurrency = plan.concurrency

    async def run(self, deadline: float) -> int:
        return await run_workers(self._send_one, self._concurrency, deadline)

    async def _send_one(self, token: str) -> bool:
        response = await self._client.post(self._url, content=self._template.body_for(token),
                                           headers=self._headers)
        return response.status_code == 200

    async def close(self) -> None:
        await self._client.aclose()


def herald_settings(plan: Plan) -> Settings:
    return Settings(sender_concurrency=plan.concurrency, fcm_endpoint=plan.endpoint,
                    fcm_project_id=PROJECT, redis_url=plan.redis_url)


class HeraldClient:
    """Herald's ``FcmClient`` alone: pre-encoded bodies over aiohttp's keep-alive pool."""

    def __init__(self, plan: Plan) -> None:
        settings = herald_settings(plan)
        self._session = open_session(settings)
        self._client = FcmClient(self._session, settings, StaticTokens())  # type: ignore[arg-type]
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA, replace_key=REPLACE_KEY))
        self._concurrency = plan.concurrency

    async def run(self, deadline: float) -> int:
        return await run_workers(self._send_one, self._concurrency, deadline)

    async def _send_one(self, token: str) -> bool:
        return (await self._client.send(self._template.body_for(token))).ok

    async def close(self) -> None:
        await self._session.close()


class HeraldBatches:
    """What a sender pod runs per batch: ``BatchSender`` with the shared Redis token bucket,
    the per-request cancel check and metrics, ``streams`` batches in flight at once."""

    def __init__(self, plan: Plan, streams: int) -> None:
        settings = herald_settings(plan)
        self._session = open_session(settings)
        client = FcmClient(self._session, settings, StaticTokens())  # type: ignore[arg-type]
        self._redis = herald_redis.connect(settings)
        self._key = RedisKeys(f"bench-{uuid.uuid4().hex}").rate_bucket(names.FLEET_RATE_BUCKET)
        bucket = TokenBucket(self._redis, self._key, UNTHROTTLED_RATE_PER_S)
        self._sender = BatchSender(client, settings.sender_concurrency, settings.fcm_max_retries,
                                   bucket)
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA, replace_key=REPLACE_KEY))
        self._targets = [Target(position, token) for position, token in enumerate(TOKENS[:SENDER_BATCH])]
        self._cancelled = asyncio.Event()
        self._streams = streams

    async def run(self, deadline: float) -> int:
        counts = await asyncio.gather(*(self._stream(deadline) for _ in range(self._streams)))
        return sum(counts)

    async def _stream(self, deadline: float) -> int:
        sent = 0
        while time.perf_counter() < deadline:
            result = await self._sender.send(self._template, self._targets, self._cancelled, None)
            sent += accepted(result, len(self._targets))
        return sent

    async def close(self) -> None:
        await self._redis.delete(self._key)
        await self._redis.aclose()
        await self._session.close()


def accepted(result: BatchResult, expected: int) -> int:
    """Every recipient of the batch sent, or the row fails."""
    sent = sum(outcome.sent for outcome in result.outcomes)
    if result.stopped or sent != expected:
        raise BenchError(f"BatchSender sent {sent} of {expected} (stopped={result.stopped})")
    return sent


class HeraldWindow:
    """What a sender pod runs: ``SendWindow`` with the shared Redis token bucket, the cancel
    check and metrics, ``HERALD_SENDER_PREFETCH`` chunks of 500 sent through it at once, chunk
    after chunk. Recording is a no-op here (the window's own cost; ``bench.pipeline`` has the
    store in it)."""

    def __init__(self, plan: Plan) -> None:
        settings = herald_settings(plan)
        self._session = open_session(settings)
        client = FcmClient(self._session, settings, StaticTokens())  # type: ignore[arg-type]
        self._redis = herald_redis.connect(settings)
        self._key = RedisKeys(f"bench-{uuid.uuid4().hex}").rate_bucket(names.FLEET_RATE_BUCKET)
        bucket = TokenBucket(self._redis, self._key, UNTHROTTLED_RATE_PER_S)
        policy = WindowPolicy(connections=settings.sender_concurrency,
                              unrecorded=settings.sender_batch_size,
                              max_retries=settings.fcm_max_retries)
        self._window = SendWindow(client, policy, bucket)
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA, replace_key=REPLACE_KEY))
        self._targets = [Target(position, token)
                         for position, token in enumerate(TOKENS[:SENDER_BATCH])]
        self._cancelled = asyncio.Event()
        self._deadline = 0.0

    async def run(self, deadline: float) -> int:
        self._deadline = deadline
        counts = await asyncio.gather(*(self._stream() for _ in range(SENDER_PREFETCH)))
        return sum(counts)

    async def _stream(self) -> int:
        sent = 0

        async def record(outcomes: list[RecipientOutcome]) -> None:
            nonlocal sent
            if not all(outcome.sent for outcome in outcomes):
                raise BenchError("the emulator refused a request")
            sent += len(outcomes)

        while time.perf_counter() < self._deadline:
            await self._window.send(self._template, self._targets, may_start=self._before_deadline,
                                    cancelled=self._cancelled, record=record)
        return sent

    async def _before_deadline(self) -> bool:
        return time.perf_counter() < self._deadline

    async def close(self) -> None:
        await self._redis.delete(self._key)
        await self._redis.aclose()
        await self._session.close()


async def run_workers(send_one: Callable[[str], Awaitable[bool]], concurrency: int,
                      deadline: float) -> int:
    """``concurrency`` coroutines sending back to back: a constant number of requests in flight,
    with no batching of its own to add idle time between batches."""
    counts = await asyncio.gather(*(_worker(send_one, first, concurrency, deadline)
                                    for first in range(concurrency)))
    return sum(counts)


async def _worker(send_one: Callable[[str], Awaitable[bool]], first: int, step: int,
                  deadline: float) -> int:
    sent, index = 0, first
    while time.perf_counter() < deadline:
        if not await send_one(TOKENS[index % len(TOKENS)]):
            raise BenchError("the emulator refused a request")
        sent, index = sent + 1, index + step
    return sent


@dataclass(frozen=True)
class Row:
    name: str
    loop: str
    """``uvloop`` where Herald would run the code (its services do), else asyncio's default."""
    what: str
    open: Callable[[Plan], Transport]
    in_flight: str = "{c}"
    """Requests in flight at most; ``{c}`` is ``--concurrency``."""


ROWS = {row.name: row for row in (
    Row(BASELINE, "uvloop", "firebase_admin.messaging.send_each_async, 500 messages per call",
        FirebaseAdmin, "500/call"),
    Row("firebase-admin-asyncio", "asyncio", "the same on asyncio's default loop", FirebaseAdmin,
        "500/call"),
    Row("httpx", "uvloop", "raw httpx.AsyncClient, HTTP/1.1, Herald's pre-encoded bodies", RawHttpx),
    Row("herald-fcm-client", "uvloop", "herald.adapters.fcm.FcmClient (aiohttp)", HeraldClient),
    Row("herald-fcm-client-asyncio", "asyncio", "the same on asyncio's default loop", HeraldClient),
    Row("herald-batch-sender", "uvloop",
        f"bench.transport.lockstep.BatchSender + Redis TokenBucket, batches of {SENDER_BATCH} "
        "one at a time",
        functools.partial(HeraldBatches, streams=1), "<={c}"),
    Row("herald-batch-sender-x4", "uvloop",
        "the same with 4 batches at once, as a pod with HERALD_SENDER_PREFETCH=4 runs them",
        functools.partial(HeraldBatches, streams=SENDER_PREFETCH), "<={c}"),
    Row("herald-send-window", "uvloop",
        "herald.service_layer.sending.window.SendWindow + Redis TokenBucket: a sliding window, "
        f"4 chunks of {SENDER_BATCH} at once, at most {SENDER_BATCH} started and unrecorded",
        HeraldWindow, "<={c}"),
)}
