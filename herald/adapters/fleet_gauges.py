"""Gauges of the whole stack, read from MongoDB, Redis and RabbitMQ, for the alerts.

The metrics of ``herald/observability.py`` count what one pod did. The alerts in
``deploy/prometheus/alerts.yml`` also need what the stack looks like at one instant: campaigns per
unfinished status, the oldest cancel still waiting for pods, cancellations no request explains,
work waiting in RabbitMQ, and how full the fleet-wide FCM bucket is. ``refresh_fleet_gauges``
reads them all and sets the gauges below; the api calls it every few seconds. Several api
replicas report the same values, so alerts take their ``max``.

``herald_first_request_wait_seconds{lane}`` is what the senders' histogram
(``herald_first_request_seconds``) cannot say while it happens: a campaign still waiting for its
first FCM request is observed by nobody until it gets one, so an urgent campaign stuck behind a
dead fleet would never show in a histogram. The gauge reads the waiting ones from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection
from aio_pika.exceptions import ChannelNotFoundEntity
from bson import ObjectId
from prometheus_client import Gauge
from pymongo.asynchronous.collection import AsyncCollection
from redis.asyncio import Redis

from herald import names
from herald.adapters.mongo import Document
from herald.adapters.records import from_bson
from herald.domain.documents import Campaign
from herald.domain.lanes import Lane
from herald.domain.status import TERMINAL, Status
from herald.names import RedisKeys

UNFINISHED = tuple(status for status in Status if status not in TERMINAL)
"""Statuses ``herald_campaigns`` reports (finished campaigns only ever grow in number)."""

WATCHED_QUEUES = (*names.CHUNK_QUEUES.values(), names.DISPATCH_QUEUE, names.DEAD_CHUNKS_QUEUE,
                  names.DEAD_MESSAGES_QUEUE, names.DEAD_CANCELS_QUEUE)

CLOSE_TIMEOUT_S = 3.0

PROJECT_BUCKET = names.FLEET_RATE_BUCKET
"""Scope of the fleet-wide FCM token bucket (``RateLimits.project`` in adapters/rate_limit.py;
tests/integration/test_fleet_gauges.py checks that both name the same Redis key)."""

CAMPAIGNS = Gauge("herald_campaigns", "Campaigns now in each unfinished status", ["status"])
CANCELLING_OLDEST_SECONDS = Gauge(
    "herald_campaign_cancelling_oldest_seconds",
    "Age of the oldest cancel still waiting for pods to confirm (0 when none is)")
CHUNKS_UNFINISHED = Gauge(
    "herald_chunks_unfinished",
    "Chunks published and not yet finished, over the campaigns in progress")
CANCELLATIONS_WITHOUT_REQUEST = Gauge(
    "herald_cancellations_without_request",
    "Campaigns cancelled, cancelling or carrying a cancel flag, with no cancel request recorded "
    "(should stay 0)")
QUEUE_MESSAGES_READY = Gauge("herald_queue_messages_ready",
                             "Messages ready for delivery in a Herald queue", ["queue"])
FCM_QUOTA_AVAILABLE_RATIO = Gauge(
    "herald_fcm_quota_available_ratio",
    "Tokens in the fleet-wide FCM bucket over its capacity: 1 idle, 0 exhausted, "
    "below 0 paused by an FCM Retry-After")
FIRST_REQUEST_WAIT_SECONDS = Gauge(
    "herald_first_request_wait_seconds",
    "Longest wait of a campaign that is due and has had no FCM request yet, since it was due "
    "(or approved), by lane; 0 when none waits", ["lane"])
for _lane in Lane:  # a series per lane from the start: alerts and panels see 0, not nothing
    FIRST_REQUEST_WAIT_SECONDS.labels(_lane.value)
REFRESHED = Gauge("herald_fleet_gauges_refreshed_timestamp_seconds",
                  "When the fleet gauges were last refreshed (Unix time)")


class ReadyCounts(Protocol):
    async def ready(self, queue: str) -> int: ...


@dataclass(frozen=True)
class FleetReading:
    """What one refresh read (also what it set the gauges to)."""

    campaigns: dict[str, int]
    cancelling_oldest_s: float
    chunks_unfinished: int
    cancellations_without_request: int
    queues_ready: dict[str, int]
    fcm_quota_available_ratio: float
    without_request_ids: list[str] = field(default_factory=list)
    first_request_wait_s: dict[str, float] = field(default_factory=dict)
    """By lane: the longest a due campaign has waited for its first FCM request (0: none)."""
    uncapped_chunks_unfinished: int = 0
    """Of ``chunks_unfinished``, those of uncapped campaigns without a rollout: work that keeps
    senders as busy as they can be (``adapters/fleet_rate.py``)."""


async def refresh_fleet_gauges(campaigns: AsyncCollection[Document], redis: Redis,
                               keys: RedisKeys, queues: ReadyCounts, fcm_rate_per_min: int,
                               now: datetime) -> FleetReading:
    """Read the stack's state and set every gauge of this module; raises on a store error
    (the gauges then keep their values and ``REFRESHED`` grows old, which an alert watches)."""
    live = await campaigns.find({"status": {"$in": [s.value for s in UNFINISHED]}},
                                {"status": 1, "cancel": 1, "progress": 1, "updated_at": 1,
                                 "rate_per_s": 1, "rollout": 1}).to_list()
    unexplained = await _cancelled_without_request(campaigns)
    unexplained |= _live_without_request(live)
    unexplained |= await _flagged_without_request(campaigns, redis, keys)
    reading = FleetReading(
        campaigns=_count_by_status(live),
        cancelling_oldest_s=_oldest_cancel_s(live, now),
        chunks_unfinished=_chunks_unfinished(live),
        uncapped_chunks_unfinished=_chunks_unfinished(
            [c for c in live if c.get("rate_per_s") is None and c.get("rollout") is None]),
        cancellations_without_request=len(unexplained),
        queues_ready={queue: await queues.ready(queue) for queue in WATCHED_QUEUES},
        fcm_quota_available_ratio=await _quota_available_ratio(redis, keys, fcm_rate_per_min),
        without_request_ids=sorted(unexplained),
        first_request_wait_s=await _first_request_waits(campaigns, now))
    _publish(reading)
    return reading


def _publish(reading: FleetReading) -> None:
    for status, count in reading.campaigns.items():
        CAMPAIGNS.labels(status).set(count)
    CANCELLING_OLDEST_SECONDS.set(reading.cancelling_oldest_s)
    CHUNKS_UNFINISHED.set(reading.chunks_unfinished)
    CANCELLATIONS_WITHOUT_REQUEST.set(reading.cancellations_without_request)
    for queue, ready in reading.queues_ready.items():
        QUEUE_MESSAGES_READY.labels(queue).set(ready)
    FCM_QUOTA_AVAILABLE_RATIO.set(reading.fcm_quota_available_ratio)
    for lane, waited_s in reading.first_request_wait_s.items():
        FIRST_REQUEST_WAIT_SECONDS.labels(lane).set(waited_s)
    REFRESHED.set(time.time())


# --- campaigns -------------------------------------------------------------------------------------

def _count_by_status(live: list[Document]) -> dict[str, int]:
    counted = Counter(campaign["status"] for campaign in live)
    return {status.value: counted.get(status.value, 0) for status in UNFINISHED}


def _requested_at(campaign: Document) -> datetime | None:
    cancel = campaign.get("cancel")
    requested_at = cancel.get("requested_at") if isinstance(cancel, dict) else None
    return requested_at if isinstance(requested_at, datetime) else None


def _oldest_cancel_s(live: list[Document], now: datetime) -> float:
    """A cancel whose request is missing is aged from the campaign's last update instead."""
    started = [_requested_at(c) or c.get("updated_at") for c in live
               if c["status"] == Status.CANCELLING.value]
    ages_s = [(now - instant).total_seconds() for instant in started
              if isinstance(instant, datetime)]
    return max([0.0, *ages_s])


def _chunks_unfinished(live: list[Document]) -> int:
    """Work senders should be doing now: a local-time campaign parked between its waves has
    every published chunk finished, so it counts nothing."""
    total = 0
    for campaign in live:
        if campaign["status"] == Status.IN_PROGRESS.value:
            progress = campaign.get("progress") or {}
            total += max(0, progress.get("chunks_published", 0) - progress.get("chunks_done", 0))
    return total


WAITING_FOR_A_FIRST_REQUEST = (Status.PENDING, Status.IN_PROGRESS)


async def _first_request_waits(campaigns: AsyncCollection[Document],
                               now: datetime) -> dict[str, float]:
    """By lane, the longest a campaign that could send has waited for its first FCM request,
    counted from ``Campaign.due_since`` (due, or approved if that came later). A campaign sent
    in each device's local time is left out: its due instant is the first timezone's, and its
    first request waits for the first zone that has devices; so is one whose first wave quiet
    hours hold (it waits for the window to end).

    ``first_request_at`` is tested here, not in the query: on nx-27017 ``{field: null}`` beside
    an ``$in`` and a range on other fields misses the documents whose field is an explicit null
    (docs/mongodb-stand-in.md); the campaigns due and unfinished are few enough to read."""
    due = campaigns.find({"status": {"$in": [s.value for s in WAITING_FOR_A_FIRST_REQUEST]},
                          "due_at": {"$lte": now}})
    waits_s = dict.fromkeys((lane.value for lane in Lane), 0.0)
    async for document in due:
        if document.get("first_request_at") is not None:
            continue
        campaign = from_bson(Campaign, document)
        waves = campaign.dispatch.waves
        if campaign.local_time is None and not (waves and waves[0].held):
            waited_s = max(0.0, (now - campaign.due_since).total_seconds())
            waits_s[campaign.lane.value] = max(waits_s[campaign.lane.value], waited_s)
    return waits_s


def _live_without_request(live: list[Document]) -> set[str]:
    return {str(c["_id"]) for c in live
            if c["status"] == Status.CANCELLING.value and _requested_at(c) is None}


async def _cancelled_without_request(campaigns: AsyncCollection[Document]) -> set[str]:
    """Herald writes the cancel request in the same update that sets ``cancelled``; a
    cancelled campaign without one was written by something else, or by a bug."""
    found = campaigns.find({"status": Status.CANCELLED.value, "cancel.requested_at": None},
                           {"_id": 1})
    return {str(campaign["_id"]) async for campaign in found}


async def _flagged_without_request(campaigns: AsyncCollection[Document], redis: Redis,
                                   keys: RedisKeys) -> set[str]:
    """A cancel flag makes every sender drop the campaign's chunks: a flag on a campaign that
    nobody asked to cancel stops it without a trace in MongoDB (seed 000's "false
    cancellation"). Flags are raised only after the request is written, so no race counts."""
    prefix = keys.cancel_flag("")
    ids = [ObjectId(key[len(prefix):]) async for key in _flag_keys(redis, keys)
           if ObjectId.is_valid(key[len(prefix):])]
    if not ids:
        return set()
    flagged = campaigns.find({"_id": {"$in": ids}}, {"cancel": 1})
    return {str(c["_id"]) async for c in flagged if _requested_at(c) is None}


async def _flag_keys(redis: Redis, keys: RedisKeys) -> AsyncIterator[str]:
    async for key in redis.scan_iter(match=keys.cancel_flag_pattern(), count=500):
        yield key.decode() if isinstance(key, bytes) else str(key)


# --- FCM bucket -----------------------------------------------------------------------------------

async def _quota_available_ratio(redis: Redis, keys: RedisKeys, rate_per_min: int) -> float:
    """Refill the bucket's stored state to Redis' clock, as the bucket's own script does
    (adapters/rate_limit.py), without taking anything; a missing key is a full bucket."""
    rate_per_s = rate_per_min / 60
    capacity = max(1.0, rate_per_s)
    tokens, at = await redis.hmget(keys.rate_bucket(PROJECT_BUCKET), ["tokens", "at"])
    if tokens is None or at is None:
        return 1.0
    seconds, microseconds = await redis.time()
    elapsed_s = max(0.0, seconds + microseconds / 1e6 - float(at))
    return min(capacity, float(tokens) + elapsed_s * rate_per_s) / capacity


# --- RabbitMQ -------------------------------------------------------------------------------------

class QueueDepths:
    """Ready counts of queues, read by passive declares on a connection of this reader's own.

    A passive declare answers with the queue's count at that instant; ``rabbitmqctl
    list_queues`` and the management API report quorum queues' counts only every few seconds.
    aio-pika's robust channels keep passively declared queues and answer later declares from
    that cache, so this reader uses a plain connection and reconnects after a failure.
    """

    def __init__(self, rabbitmq_url: str) -> None:
        self._url = rabbitmq_url
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None

    async def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` now; 0 for a queue not declared yet."""
        try:
            channel = await self._open_channel()
            declared = await channel.declare_queue(queue, passive=True)
        except ChannelNotFoundEntity:
            self._channel = None  # RabbitMQ closes a channel after a failed passive declare
            return 0
        except Exception:  # a connection the broker closed (it may still look open): anew next time
            await self.close()
            raise
        result = declared.declaration_result
        return int(result.message_count or 0)

    async def _open_channel(self) -> AbstractChannel:
        if self._connection is None or self._connection.is_closed:
            self._connection = await aio_pika.connect(self._url, timeout=5)
            self._channel = None
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._connection.channel(publisher_confirms=False)
        return self._channel

    async def close(self) -> None:
        """Close the reader's connection; a broker that does not answer within a few seconds
        (it is restarting, say) is left to drop the connection itself."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), CLOSE_TIMEOUT_S)
