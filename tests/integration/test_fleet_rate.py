"""The fleet's measured rate (herald/adapters/fleet_rate.py) on real Redis: the project bucket
counts every token it grants, and two busy readings measure what each sender sent a second."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from herald import names
from herald.adapters.fleet_rate import WEIGHT_OF_NEW, FleetRate
from herald.adapters.rate_limit import RedisRateLimits
from herald.domain.lanes import Lane
from herald.names import RedisKeys
from herald.settings import Settings

PROJECT_RATE_PER_S = 100_000.0


@pytest.fixture
def keys(settings: Settings) -> RedisKeys:
    return RedisKeys(settings.mongodb_database)


async def take(limits: RedisRateLimits, tokens: int, lane: Lane = Lane.STANDARD) -> None:
    for bucket in limits.for_lane(lane):
        assert await bucket.take(tokens) == tokens


async def test_the_project_bucket_counts_what_every_lane_takes(redis: Any, keys: RedisKeys) -> None:
    limits = RedisRateLimits(redis, keys, PROJECT_RATE_PER_S, urgent_reserve_share=0.2)
    await take(limits, 300)
    await take(limits, 200, Lane.BULK)  # from the bulk share, and from the project's
    await take(limits, 50, Lane.URGENT)
    taken = await redis.hget(keys.rate_bucket(names.FLEET_RATE_BUCKET), "taken")
    assert int(taken) == 550


async def test_two_busy_readings_measure_each_senders_rate(redis: Any, keys: RedisKeys) -> None:
    limits = RedisRateLimits(redis, keys, PROJECT_RATE_PER_S)
    meter = FleetRate(redis, keys, min_reading_s=0.2)
    await take(limits, 100)
    assert await meter.observe(busy=True, senders=2) is None  # the first reading
    await asyncio.sleep(0.5)
    await take(limits, 1_000)
    measured = await meter.observe(busy=True, senders=2)
    assert measured is not None and 700 < measured < 1_000  # 1,000 in ~0.5 s, by 2 senders
    assert await meter.per_sender_per_s() == pytest.approx(measured)

    await asyncio.sleep(0.5)
    await take(limits, 4_000)
    again = await meter.observe(busy=True, senders=2)
    assert again is not None and again > measured
    assert await meter.per_sender_per_s() == pytest.approx(
        measured + WEIGHT_OF_NEW * (again - measured))


async def test_an_idle_or_short_interval_measures_nothing(redis: Any, keys: RedisKeys) -> None:
    """An idle fleet sends what it is given, not what it can: only busy intervals count."""
    limits = RedisRateLimits(redis, keys, PROJECT_RATE_PER_S)
    meter = FleetRate(redis, keys, min_reading_s=0.2)
    await meter.observe(busy=False, senders=2)
    await asyncio.sleep(0.3)
    await take(limits, 100)
    assert await meter.observe(busy=True, senders=2) is None  # busy at one end only
    await take(limits, 100)
    assert await meter.observe(busy=True, senders=2) is None  # too short
    await asyncio.sleep(0.3)
    await take(limits, 100)
    assert await meter.observe(busy=True, senders=0) is None  # nobody to divide by
    assert await meter.per_sender_per_s() is None
