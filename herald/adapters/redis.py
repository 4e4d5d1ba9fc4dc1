"""Coordination through Redis: cancel flags with a TTL, and pod heartbeats.

Redis holds nothing that cannot be lost: a flag only speeds up what MongoDB's campaign status
already says, and a heartbeat is rewritten every few seconds.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict

import orjson
import redis.asyncio as aioredis

from herald.domain.pods import PodBeat
from herald.names import RedisKeys
from herald.settings import Settings

Redis = aioredis.Redis


MAX_CONNECTIONS = 64
"""Connections to Redis per process. Enough for every sender's bursts (a storm of FCM push-back
retries takes a rate-limit token per retry: up to ``HERALD_SENDER_CONCURRENCY`` at once); past
it, calls wait for a free connection instead of failing."""
POOL_WAIT_S = 10.0
"""Longest a call waits for a free connection before it fails like an outage."""


def connect(settings: Settings) -> Redis:
    """Client for the stack's Redis (database chosen by the URL); connects on first use.

    A blocking pool: redis-py's default pool (100 connections) raises "Too many connections" on
    the 101st concurrent call, which the sender took for a Redis outage and handed chunks back
    (issue 23, under a 429 storm). Here a burst queues for a connection.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_WAIT_S,
        socket_connect_timeout=5,
        socket_timeout=5,
        health_check_interval=10,
        retry_on_timeout=True,
    )
    return aioredis.Redis.from_pool(pool)  # owns it: closing the client closes the pool


class RedisCancelFlags:
    """``cancel:<campaign>`` keys: the cancel intent, for pods that missed the broadcast.

    The TTL (``HERALD_CANCEL_FLAG_TTL_S``, a week by default) is longer than any campaign runs,
    so a redelivered chunk found days later still sees its campaign cancelled; after that the
    campaign's own status in MongoDB answers.
    """

    def __init__(self, redis: Redis, keys: RedisKeys, ttl_s: int) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_s = ttl_s

    async def raise_flag(self, campaign_id: str) -> None:
        await self._redis.set(self._keys.cancel_flag(campaign_id), b"1", ex=self._ttl_s)

    async def is_raised(self, campaign_id: str) -> bool:
        return bool(await self._redis.exists(self._keys.cancel_flag(campaign_id)))

    async def count(self) -> int:
        """Number of live flags (a gauge: it should stay small if the TTL works)."""
        found = 0
        async for _ in self._redis.scan_iter(match=self._keys.cancel_flag_pattern(), count=500):
            found += 1
        return found


class RedisPodRegistry:
    """Heartbeats: one key per pod, rewritten every interval, expiring after missed beats."""

    def __init__(self, redis: Redis, keys: RedisKeys, ttl_s: float) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = int(ttl_s * 1000)

    async def beat(self, pod: PodBeat) -> None:
        stamped = PodBeat(**{**asdict(pod), "beat_at": time.time()})
        await self._redis.set(self._keys.pod(pod.id), orjson.dumps(asdict(stamped)),
                              px=self._ttl_ms)

    async def is_alive(self, pod_id: str) -> bool:
        return bool(await self._redis.exists(self._keys.pod(pod_id)))

    async def remove(self, pod_id: str) -> None:
        await self._redis.delete(self._keys.pod(pod_id))

    async def live(self, services: Iterable[str] | None = None) -> list[PodBeat]:
        wanted = set(services) if services is not None else None
        keys = [k async for k in self._redis.scan_iter(match=self._keys.pod_pattern(), count=500)]
        if not keys:
            return []
        beats = [PodBeat(**orjson.loads(raw)) for raw in await self._redis.mget(keys) if raw]
        return sorted((b for b in beats if wanted is None or b.service in wanted),
                      key=lambda b: (b.service, b.id))


# KEYS[1] the key's streams; ARGV: cap (0: only refresh ARGV[3]), stale after ms, stream id.
_STREAM_SLOT = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
if cap == 0 then
  return redis.call('ZADD', KEYS[1], 'XX', 'CH', now_ms, ARGV[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) >= cap then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms, ARGV[3])
return 1
"""


class StreamSlots:
    """The event streams each API key holds open, counted across api replicas: a sorted set per
    key of stream ids by their last sign of life. A stream refreshes its place while it runs
    and gives it back when it ends; one whose replica died is forgotten after ``stale_s``."""

    def __init__(self, redis: Redis, keys: RedisKeys, per_key: int, stale_s: float) -> None:
        self._redis = redis
        self._keys = keys
        self._per_key = per_key
        self._stale_ms = int(stale_s * 1000)
        self._script = redis.register_script(_STREAM_SLOT)

    async def take(self, key_id: str) -> str | None:
        """A place for one more stream of ``key_id`` (its id), or None: the key holds
        ``per_key`` already."""
        stream_id = uuid.uuid4().hex
        taken = await self._script(keys=[self._keys.event_streams(key_id)],
                                   args=[self._per_key, self._stale_ms, stream_id])
        return stream_id if int(taken) else None

    async def refresh(self, key_id: str, stream_id: str) -> None:
        await self._script(keys=[self._keys.event_streams(key_id)],
                           args=[0, self._stale_ms, stream_id])

    async def release(self, key_id: str, stream_id: str) -> None:
        await self._redis.zrem(self._keys.event_streams(key_id), stream_id)


class FirstSightings:
    """Which pod sees a message first, when every pod receives a copy: the first to claim its
    digest (``SET NX`` with a TTL) is the one that acts on it."""

    def __init__(self, redis: Redis, keys: RedisKeys, ttl_s: int, kind: str = "malformed") -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_s = ttl_s
        self._kind = kind

    async def first(self, body: bytes) -> bool:
        """True for the first pod to present ``body`` within the TTL (True as well when Redis
        cannot tell: every pod then acts, and what it acts on is guarded anyway)."""
        digest = hashlib.sha256(body).hexdigest()
        return bool(await self._redis.set(self._keys.first_seen(self._kind, digest), b"1",
                                          nx=True, ex=self._ttl_s))
