"""The fleet-wide FCM rate limit: one token bucket in Redis (a Lua script on Redis' own clock)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from herald.adapters.rate_limit import RedisRateLimits, TokenBucket
from herald.names import RedisKeys
from herald.settings import Settings


def bucket(redis: Any, settings: Settings, rate_per_s: float, name: str = "fcm") -> TokenBucket:
    return TokenBucket(redis, RedisKeys(settings.mongodb_database).rate_bucket(name), rate_per_s)


async def raw_take(limiter: TokenBucket, wanted: int) -> tuple[int, int]:
    """One round trip to the script: (granted, milliseconds to wait for the rest)."""
    granted, wait_ms = await limiter._script(  # the script itself, without the waiting loop
        keys=[limiter._key], args=[limiter._rate, limiter._capacity, wanted, 0])
    return int(granted), int(wait_ms)


async def test_a_full_bucket_grants_a_second_of_tokens_then_asks_to_wait(redis: Any,
                                                                         settings: Settings) -> None:
    limiter = bucket(redis, settings, rate_per_s=1000)
    first = await raw_take(limiter, 1000)
    second = await raw_take(limiter, 500)
    assert first == (1000, 0)
    granted, wait_ms = second
    assert granted < 50  # only what refilled in the few milliseconds since
    assert 400 <= wait_ms <= 500


async def test_senders_sharing_the_bucket_never_exceed_the_rate_together(
        redis: Any, settings: Settings) -> None:
    senders = [bucket(redis, settings, rate_per_s=2000) for _ in range(4)]
    started = time.monotonic()
    results = await asyncio.gather(*(raw_take(s, 400) for s in senders for _ in range(5)))
    elapsed = time.monotonic() - started
    granted = sum(g for g, _ in results)
    assert granted <= 2000 + 2000 * elapsed + 1  # capacity plus what refilled meanwhile
    assert granted >= 2000  # and the whole burst capacity was handed out


async def test_a_429_drains_the_bucket_for_the_retry_after_of_every_sender(
        redis: Any, settings: Settings) -> None:
    one, other = bucket(redis, settings, 1000), bucket(redis, settings, 1000)
    await one.penalize(2.0)
    granted, wait_ms = await raw_take(other, 100)
    assert granted == 0
    assert 2000 <= wait_ms <= 2200


async def test_take_waits_for_the_tokens_and_stops_waiting_on_cancel(
        redis: Any, settings: Settings) -> None:
    limiter = bucket(redis, settings, rate_per_s=100)
    assert await limiter.take(100) == 100
    cancelled = asyncio.Event()
    cancelled.set()
    assert await limiter.take(100, cancelled) == 0


async def test_a_campaign_with_its_own_rate_gets_its_own_bucket(redis: Any,
                                                                settings: Settings) -> None:
    limits = RedisRateLimits(redis, RedisKeys(settings.mongodb_database), project_rate_per_s=10_000)
    assert limits.for_campaign("c1", None) is None
    capped = limits.for_campaign("c1", 50)
    assert capped is limits.for_campaign("c1", 50)
    assert capped is not None
    assert await raw_take(capped, 100) == (50, 1000)
