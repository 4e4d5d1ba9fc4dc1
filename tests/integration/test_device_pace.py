"""The per-device pace on real Redis (issue 32, point 4): the script keeps the domain's rule
(``herald/domain/pace.py``), and two senders asking at once for the same devices, over and over,
never get two messages to one device less than an interval apart: Redis runs the script alone,
on its own clock."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from typing import Any

from herald.adapters.device_pace import RedisDevicePace
from herald.names import RedisKeys
from herald.settings import Settings

DEVICES = [f"pace-device-{i}" for i in range(50)]


def pace(redis: Any, settings: Settings, interval_ms: int) -> RedisDevicePace:
    return RedisDevicePace(redis, RedisKeys(settings.mongodb_database), interval_ms)


async def test_a_batch_is_one_step_and_a_device_waits_for_its_moment(
        redis: Any, settings: Settings) -> None:
    devices = pace(redis, settings, 500)
    assert await devices.reserve(["a", "b"]) == [0.0, 0.0]
    waits = await devices.reserve(["a", "c", "a"])
    assert waits[1] == 0.0
    assert 0.3 < waits[0] <= 0.5 and 0.3 < waits[2] <= 0.5  # a twice in one batch: both wait
    assert 400 < await redis.pttl(devices.key("a")) <= 500  # the key lives as long as the wait
    assert "pace-device-7" not in devices.key("pace-device-7")  # a digest names the device


async def test_a_hold_keeps_every_message_off_the_device_until_it_ends(
        redis: Any, settings: Settings) -> None:
    devices = pace(redis, settings, 100)
    await devices.hold("held", 2.0)
    [wait] = await devices.reserve(["held"])
    assert 1.5 < wait <= 2.0
    await devices.hold("held", 0.5)  # never moved back
    [wait] = await devices.reserve(["held"])
    assert 1.5 < wait <= 2.0


async def test_two_senders_asking_at_once_never_get_a_device_twice_within_an_interval(
        redis: Any, settings: Settings) -> None:
    """Two callers (two connections' worth of senders) ask for all 50 devices in blocks, as fast
    as they can, for 2 s; each sends what it was granted. Per device, the grants (timed here, as
    they return) are never closer than the interval, less the spread of two round trips."""
    interval_ms = 200
    granted: dict[str, list[float]] = defaultdict(list)
    stop_at = time.monotonic() + 2.0

    async def sender(devices: RedisDevicePace) -> int:
        asked = 0
        while time.monotonic() < stop_at:
            before = time.monotonic()
            waits = await devices.reserve(DEVICES)
            after = time.monotonic()
            asked += 1
            for device, wait in zip(DEVICES, waits, strict=True):
                if wait == 0:
                    granted[device].append((before + after) / 2)
        return asked

    asked = await asyncio.gather(sender(pace(redis, settings, interval_ms)),
                                 sender(pace(redis, settings, interval_ms)))
    assert min(asked) > 10  # both really asked, many times over
    for device in DEVICES:
        times = sorted(granted[device])
        assert 5 <= len(times) <= 2000 // interval_ms + 1, (device, len(times))
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert min(gaps) > interval_ms / 1000 * 0.5, (device, min(gaps))
