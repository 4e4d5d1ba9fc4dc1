"""Herald's Redis client (herald/adapters/redis.py) under a burst: more calls at once than it
has connections wait for one, instead of failing as an outage would (a storm of FCM push-back
retries takes a rate-limit token per retry, up to 256 per sender at once)."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from herald.adapters.redis import MAX_CONNECTIONS, connect
from herald.settings import Settings
from tests.support import unique_name


async def test_a_burst_beyond_the_pool_waits_for_connections_and_never_fails() -> None:
    client = connect(Settings(redis_url="redis://127.0.0.1:6379/0",
                              fcm_endpoint="http://127.0.0.1:9"))
    key = unique_name("herald_pool")
    try:
        results = await asyncio.gather(*(client.incr(key) for _ in range(1_000)))
        assert sorted(results) == list(range(1, 1_001))
        assert len(client.connection_pool._in_use_connections) <= MAX_CONNECTIONS  # type: ignore[attr-defined]
    finally:
        await client.delete(key)
        await client.aclose()


async def test_redis_pys_default_pool_fails_the_same_burst() -> None:
    """The reason for the blocking pool: the default one raises past 100 connections."""
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    key = unique_name("herald_pool")
    try:
        results = await asyncio.gather(*(client.incr(key) for _ in range(1_000)),
                                       return_exceptions=True)
        assert any(isinstance(r, Exception) and "Too many connections" in str(r)
                   for r in results)
    finally:
        await client.delete(key)
        await client.aclose()
