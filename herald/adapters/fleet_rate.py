"""What the fleet sends in a second, measured (issue 29, point 6: the forecast's rate).

Every FCM request of every sender takes a token from the project's bucket in Redis
(``adapters/rate_limit.py``), and the bucket counts the tokens it granted (``taken``). The api's
gauge loop (every 5 s) reads that counter with Redis' clock: the difference between two readings
over the time between them is what the fleet sent. It is the fleet's *capacity* only while the
fleet had more to send than it could: a reading counts when, at both ends, uncapped campaigns
had chunks waiting for senders or in their hands (at least ``BUSY_CHUNKS_PER_SENDER`` per live
sender, rollouts left out: their chunks stay open while they hold). Capped campaigns' requests
count too: they are the fleet's work as much as any.

Why this counter and not the campaigns' sent counts: the counts grow by whole chunks (500
recipients at once), a campaign finishing between two readings leaves the unfinished statuses,
and a rollout's chunks are counted apart; the bucket sees every request once, as it starts, for
one Redis read.

The rate is kept per live sender (an exponentially weighted mean of the busy readings, in Redis,
so every api replica shares it): scaling the senders out scales the forecast at once, and a
fleet that got slower is seen within two readings. It is not a sender's ceiling in every
deployment: the database or FCM's latency may bound the fleet before the senders do.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from herald import names
from herald.names import RedisKeys

BUSY_CHUNKS_PER_SENDER = 2
"""Open chunks of uncapped campaigns per live sender for the fleet to count as busy."""
MIN_READING_S = 2.0
"""Shorter intervals between two readings are not measured (too few requests to count)."""
WEIGHT_OF_NEW = 0.5
"""Of a new reading in the mean: the last two readings make three quarters of it."""
FORGET_AFTER_S = 24 * 3600.0
"""A measurement older than this is replaced, not averaged (the fleet may have changed)."""


@dataclass(frozen=True, slots=True)
class Reading:
    at_s: float
    taken: int
    busy: bool


@dataclass(frozen=True, slots=True)
class Measured:
    per_sender_per_s: float
    at_s: float


class FleetRate:
    """Reads the project bucket's counter (the api's gauge loop) and keeps the measurement."""

    def __init__(self, redis: Redis, keys: RedisKeys, min_reading_s: float = MIN_READING_S) -> None:
        self._redis = redis
        self._keys = keys
        self._min_reading_s = min_reading_s
        self._last: Reading | None = None

    async def observe(self, busy: bool, senders: int) -> float | None:
        """Take a reading; when this one and the last were both busy, measure what every sender
        sent in a second between them and fold it into the stored mean. The measured rate per
        sender, or None."""
        reading = await self._read(busy)
        last, self._last = self._last, reading
        if last is None or not (last.busy and busy) or senders < 1:
            return None
        elapsed_s, sent = reading.at_s - last.at_s, reading.taken - last.taken
        if elapsed_s < self._min_reading_s or sent <= 0:  # too short, or the bucket expired meanwhile
            return None
        per_sender = sent / elapsed_s / senders
        await self._store(per_sender, reading.at_s)
        return per_sender

    async def measured(self) -> Measured | None:
        """The stored measurement, or None before the first one."""
        rate, at = await self._redis.hmget(self._keys.fleet_rate(), ["per_sender_per_s", "at"])
        if rate is None or at is None:
            return None
        return Measured(float(rate), float(at))

    async def per_sender_per_s(self) -> float | None:
        """What one sender sends in a second, as measured (``FleetMeasure``); None: not yet."""
        known = await self.measured()
        return None if known is None else known.per_sender_per_s

    async def _read(self, busy: bool) -> Reading:
        taken = await self._redis.hget(self._keys.rate_bucket(names.FLEET_RATE_BUCKET), "taken")
        seconds, microseconds = await self._redis.time()
        return Reading(seconds + microseconds / 1e6, int(taken or 0), busy)

    async def _store(self, per_sender: float, at_s: float) -> None:
        known = await self.measured()
        if known is not None and at_s - known.at_s < FORGET_AFTER_S:
            per_sender = known.per_sender_per_s + WEIGHT_OF_NEW * (
                per_sender - known.per_sender_per_s)
        await self._redis.hset(self._keys.fleet_rate(), mapping={
            "per_sender_per_s": repr(per_sender), "at": repr(at_s)})
