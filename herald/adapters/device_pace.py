"""The per-device pace in Redis: one key per device that was sent to within the last interval,
one atomic script per batch (``herald/domain/pace.py`` is the rule, in Python).

A device's key holds the earliest millisecond (of Redis' clock, ``TIME``: the senders' clocks do
not matter) at which its next message may start, and expires at that moment: a device nobody sent
to for an interval has no key. The script reads and moves the moments of a whole batch of devices
in one round trip; Redis runs a script alone, so two senders asking for the same device at the
same instant are served one after the other, and the second waits. Keys name a device by a digest
of its token (short whatever the token; no token in Redis' key space).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from redis.asyncio import Redis

from herald.names import RedisKeys

# KEYS: one per device. ARGV[1]: the interval in ms. Returns, per key, 0 (it may start now: its
# moment moved on one interval) or the ms to wait. Mirrors ``herald.domain.pace.reserve``.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local waits = {}
for k = 1, #KEYS do
  local next_ms = tonumber(redis.call('GET', KEYS[k]) or '0')
  if next_ms <= now then
    redis.call('SET', KEYS[k], now + interval, 'PX', interval)
    waits[k] = 0
  else
    waits[k] = next_ms - now
  end
end
return waits
"""

# KEYS: one device. ARGV[1]: ms from now before which nothing may start. Mirrors
# ``herald.domain.pace.hold``.
_HOLD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
local next_ms = tonumber(redis.call('GET', KEYS[1]) or '0')
if next_ms < until_ms then
  redis.call('SET', KEYS[1], until_ms, 'PX', until_ms - now)
end
return 1
"""


def token_digest(token: str) -> str:
    return hashlib.blake2b(token.encode(), digest_size=12).hexdigest()


class RedisDevicePace:
    """``DevicePace`` for a pace of one message per ``interval_ms`` to each device."""

    def __init__(self, redis: Redis, keys: RedisKeys, interval_ms: int) -> None:
        self._keys = keys
        self._interval_ms = interval_ms
        self._reserve = redis.register_script(_RESERVE)
        self._hold = redis.register_script(_HOLD)

    def key(self, token: str) -> str:
        return self._keys.device_pace(token_digest(token))

    async def reserve(self, tokens: Sequence[str]) -> list[float]:
        if not tokens:
            return []
        waits = await self._reserve(keys=[self.key(token) for token in tokens],
                                    args=[self._interval_ms])
        return [int(wait) / 1000 for wait in waits]

    async def hold(self, token: str, seconds: float) -> None:
        await self._hold(keys=[self.key(token)], args=[max(1, round(seconds * 1000))])
