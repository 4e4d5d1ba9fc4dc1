"""A token bucket in Redis shared by every sender: the fleet never exceeds FCM's quota.

One atomic Lua script refills the bucket from Redis' own clock (so senders' clocks do not matter)
and grants up to the tokens asked for. Senders ask for a whole batch at once, so the cost is one
round trip per batch, not per message. A 429 from FCM drains the bucket below zero for its
``Retry-After``, which pauses every sender, not only the one that was pushed back.

Each bucket also counts the tokens it ever granted (its field ``taken``): on the project's
bucket, which every request of every sender takes from, that is the fleet's requests, which
the api reads to measure what the fleet sends in a second (``adapters/fleet_rate.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from enum import StrEnum

from redis.asyncio import Redis

from herald import names
from herald.domain.lanes import Lane
from herald.names import RedisKeys
from herald.observability import RATE_LIMIT_WAIT_SECONDS

# KEYS[1] bucket; ARGV: rate per second, capacity, tokens wanted (0 = only apply a penalty, or
# with no penalty only look), penalty seconds. Returns {granted, wait_ms}; looking, wait_ms is
# the time until one token is there.
_TAKE = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local penalty_s = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - at) * rate)
if penalty_s > 0 then
  tokens = math.min(tokens, -penalty_s * rate)
end
local granted = 0
if wanted > 0 and tokens >= 1 then
  granted = math.min(wanted, math.floor(tokens))
  tokens = tokens - granted
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
if granted > 0 then
  redis.call('HINCRBY', KEYS[1], 'taken', granted)
end
redis.call('PEXPIRE', KEYS[1], math.ceil(1000 * (capacity / rate + penalty_s)) + 60000)
local wait_ms = 0
if granted < wanted then
  wait_ms = math.ceil(1000 * (math.min(wanted - granted, capacity) - tokens) / rate)
elseif wanted == 0 and penalty_s == 0 and tokens < 1 then
  wait_ms = math.ceil(1000 * (1 - tokens) / rate)
end
return {granted, wait_ms}
"""


class TokenBucket:
    """``rate_per_s`` tokens a second, bursting to one second's worth, shared through Redis."""

    def __init__(self, redis: Redis, key: str, rate_per_s: float,
                 capacity: float | None = None) -> None:
        self._redis = redis
        self._key = key
        self._rate = rate_per_s
        self._capacity = max(1.0, rate_per_s if capacity is None else capacity)
        self._script = redis.register_script(_TAKE)

    @property
    def rate_per_s(self) -> float:
        return self._rate

    def retune(self, rate_per_s: float) -> None:
        """A new rate (and one second's burst) from the next call on: the state in Redis
        stays, so a change neither refills nor drains the bucket."""
        self._rate = rate_per_s
        self._capacity = max(1.0, rate_per_s)

    async def take(self, wanted: int, stop: asyncio.Event | None = None) -> int:
        """Wait until ``wanted`` tokens are granted (fewer if ``stop`` is set meanwhile)."""
        granted = 0
        started = time.monotonic()
        while granted < wanted and not (stop is not None and stop.is_set()):
            got, wait_ms = await self._script(
                keys=[self._key], args=[self._rate, self._capacity, wanted - granted, 0])
            granted += int(got)
            if granted < wanted:
                await _sleep_unless(stop, max(int(wait_ms), 1) / 1000)
        RATE_LIMIT_WAIT_SECONDS.inc(time.monotonic() - started)
        return granted

    async def try_take_one(self) -> float:
        """Take one token without waiting: 0 if there was one, else the seconds until there
        will be (nothing is taken)."""
        got, wait_ms = await self._script(keys=[self._key], args=[self._rate, self._capacity, 1, 0])
        return 0.0 if int(got) else max(int(wait_ms), 1) / 1000

    async def wait_for_one(self) -> float:
        """Seconds until one token is there (0: now), without taking it."""
        _, wait_ms = await self._script(keys=[self._key], args=[self._rate, self._capacity, 0, 0])
        return int(wait_ms) / 1000

    async def penalize(self, seconds: float) -> None:
        """Empty the bucket for ``seconds``: every sender waits (FCM asked us to back off)."""
        await self._script(keys=[self._key], args=[self._rate, self._capacity, 0, seconds])


async def _sleep_unless(stop: asyncio.Event | None, seconds: float) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class RedisRateLimits:
    """The project-wide FCM bucket, the ``bulk`` lane's share of it, and one bucket per campaign
    that asks for its own cap.

    Every request takes a token of the project's bucket, so the fleet never exceeds
    ``project_rate_per_s`` in sum. A ``bulk`` request first takes one of the bulk bucket, which
    refills at ``(1 - urgent_reserve_share)`` of the project's rate: however much bulk wants, that
    share of the quota is left for the other lanes, and an urgent send finds room at once."""

    def __init__(self, redis: Redis, keys: RedisKeys, project_rate_per_s: float,
                 urgent_reserve_share: float = 0.0) -> None:
        self._redis = redis
        self._keys = keys
        self.project = TokenBucket(redis, keys.rate_bucket(names.FLEET_RATE_BUCKET),
                                   project_rate_per_s)
        self._bulk = TokenBucket(redis, keys.rate_bucket(names.BULK_RATE_BUCKET),
                                 project_rate_per_s * (1 - urgent_reserve_share))
        self._lanes: dict[Lane, tuple[TokenBucket, ...]] = {
            Lane.URGENT: (self.project,), Lane.STANDARD: (self.project,),
            Lane.BULK: (self._bulk, self.project) if urgent_reserve_share else (self.project,)}
        self._campaigns: dict[str, TokenBucket] = {}

    def for_lane(self, lane: Lane) -> tuple[TokenBucket, ...]:
        return self._lanes[lane]

    def for_campaign(self, campaign_id: str, rate_per_s: int | None) -> TokenBucket | None:
        if rate_per_s is None:
            return None
        bucket = self._campaigns.get(campaign_id)
        if bucket is None:
            bucket = TokenBucket(self._redis, self._keys.rate_bucket(f"campaign:{campaign_id}"),
                                 rate_per_s)
            self._campaigns[campaign_id] = bucket
        elif bucket.rate_per_s != rate_per_s:
            bucket.retune(rate_per_s)  # changed by PATCH while the campaign sends
        return bucket


class Budget(StrEnum):
    """Which of its budgets an API call spends from: reads, changes, or cancels (their own, so
    that nothing else a key does can starve a cancel)."""

    READ = "read"
    WRITE = "write"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Rate:
    per_s: float
    burst: int


class RequestBudget:
    """How many API calls each key may make: one bucket per key and ``Budget``, each refilling
    at its ``Rate`` up to its burst, shared by every api replica through Redis."""

    def __init__(self, redis: Redis, keys: RedisKeys, rates: dict[Budget, Rate]) -> None:
        self._redis = redis
        self._keys = keys
        self._rates = rates

    async def spend(self, key_id: str, budget: Budget) -> float:
        """Spend one call of ``key_id`` from ``budget``: 0, or the seconds until it may."""
        rate = self._rates[budget]
        bucket = TokenBucket(self._redis, self._keys.api_rate_bucket(f"{key_id}:{budget}"),
                             rate.per_s, capacity=rate.burst)
        return await bucket.try_take_one()


class FailedAuthentications:
    """Failed authentications per client address: each spends a token of the address's bucket
    (``per_min`` a minute, bursting to ``burst``); an address whose bucket is empty is refused
    whatever key it presents, until it refills, so a guesser learns nothing meanwhile."""

    def __init__(self, redis: Redis, keys: RedisKeys, rate: Rate) -> None:
        self._redis = redis
        self._keys = keys
        self._rate = rate

    def _bucket(self, address: str | None) -> TokenBucket:
        return TokenBucket(self._redis, self._keys.auth_failures(address or "unknown"),
                           self._rate.per_s, capacity=self._rate.burst)

    async def blocked_for(self, address: str | None) -> float:
        """Seconds until ``address`` may try a key again (0: now)."""
        return await self._bucket(address).wait_for_one()

    async def record(self, address: str | None) -> None:
        await self._bucket(address).try_take_one()
