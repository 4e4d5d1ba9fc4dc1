"""The frequency cap in Redis: one sorted set per person, one atomic script per batch.

A person's set holds the sends that count for them (``<campaign>:<seq>:<position>``, scored by
the millisecond they were counted) for the longest window in force, then expires. One Lua
script checks a whole chunk's people at once: for each, it drops what is older than the
longest window, admits them if the campaign already counts for them (another of their devices,
or this very send replayed after a crash) or if every window holds fewer campaigns than its
limit, and counts the admitted sends. Redis runs a script alone, so two senders checking the
same person for two campaigns at the same instant are served one after the other: the second
sees the first's send. Time is Redis' own (``TIME``), so the senders' clocks do not matter.

Keys name a person by a digest of their user id (or token): short whatever the token, and no
user id in Redis' key space. What a person received expires with the longest window.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from herald.domain.frequency_cap import CapRule
from herald.names import RedisKeys

# KEYS: one per person. ARGV: now in ms (0: Redis' clock), retention in ms, campaign id, the
# number of windows, then (window ms, limit) for each, then for each key the number of its
# sends and the sends. Returns 1 (admitted, counted) or 0 (capped) for each key.
_ADMIT = """
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local retention = tonumber(ARGV[2])
local prefix = ARGV[3] .. ':'
local n = tonumber(ARGV[4])
local arg = 5 + 2 * n
local result = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local count = tonumber(ARGV[arg])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - retention)
  local kept = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local admitted = 1
  local counted = false
  for i = 1, #kept, 2 do
    if string.sub(kept[i], 1, #prefix) == prefix then
      counted = true
      break
    end
  end
  if not counted then
    for w = 1, n do
      local since = now - tonumber(ARGV[3 + 2 * w])
      local seen, campaigns = {}, 0
      for i = 1, #kept, 2 do
        if tonumber(kept[i + 1]) > since then
          local campaign = string.match(kept[i], '^[^:]*')
          if not seen[campaign] then
            seen[campaign] = true
            campaigns = campaigns + 1
          end
        end
      end
      if campaigns >= tonumber(ARGV[4 + 2 * w]) then
        admitted = 0
        break
      end
    end
  end
  if admitted == 1 then
    for i = 1, count do
      redis.call('ZADD', key, 'NX', now, ARGV[arg + i])
    end
    if redis.call('PTTL', key) < retention then
      redis.call('PEXPIRE', key, retention)
    end
  end
  result[k] = admitted
  arg = arg + 1 + count
end
return result
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def person_digest(person: str) -> str:
    return hashlib.blake2b(person.encode(), digest_size=16).hexdigest()


class RedisFrequencyCaps:
    def __init__(self, redis: Redis, keys: RedisKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._admit = redis.register_script(_ADMIT)

    def key(self, person: str) -> str:
        return self._keys.frequency_cap(person_digest(person))

    async def admit(self, campaign_id: str, rule: CapRule,
                    people: Mapping[str, Sequence[str]], now_s: float | None = None
                    ) -> set[str]:
        if not people:
            return set()
        persons = list(people)
        args: list[str | int] = [0 if now_s is None else round(now_s * 1000),
                                 rule.retention_s * 1000, campaign_id, len(rule.windows)]
        for window in rule.windows:
            args += [window.seconds * 1000, window.limit]
        for person in persons:
            args += [len(people[person]), *people[person]]
        answers = await self._admit(keys=[self.key(p) for p in persons], args=args)
        return {person for person, admitted in zip(persons, answers, strict=True) if admitted}

    async def release(self, sends: Mapping[str, Sequence[str]]) -> None:
        if not sends:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for person, keys in sends.items():
                pipe.zrem(self.key(person), *keys)
            await pipe.execute()

    async def histories(self, people: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        if not people:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for person in people:
                pipe.zrange(self.key(person), 0, -1, withscores=True)
            answers = await pipe.execute()
        return {person: [(_text(send), float(at_ms) / 1000) for send, at_ms in kept]
                for person, kept in zip(people, answers, strict=True) if kept}

    async def forget(self, people: Sequence[str]) -> None:
        if people:
            await self._redis.delete(*(self.key(person) for person in people))
