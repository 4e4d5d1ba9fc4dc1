"""What the frequency cap costs a sender per chunk: ``python -m bench.frequency_cap``

Issue 32, point 2: the sender checks a chunk's people against ``HERALD_MARKETING_CAP`` in one
Redis Lua script right before it sends them (``herald/adapters/frequency_caps.py``), and
releases what FCM did not deliver in one more call. This bench runs that script on the
machine's Redis (a namespace of its own, deleted afterwards) for chunks of ``--chunk`` people,
each person already holding ``history`` campaigns within the windows, and reports, medians of
``--calls`` chunks: the wall time of one check (the round trip a sender waits before the chunk's
first request), Redis' own CPU per check (``INFO cpu``, the server's user + system time: Redis
runs one script at a time, so this is what a chunk's check holds every other client back),
and the same for a release of a whole chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from bench.common import format_table, machine, results_path, source_version, write_json
from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.domain.frequency_cap import CapRule, parse_cap, send_key
from herald.names import RedisKeys


async def redis_cpu_s(redis: Redis) -> float:
    info: dict[str, Any] = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def measure(redis: Redis, spec: str, history: int, chunk: int, calls: int
                  ) -> dict[str, float]:
    caps = RedisFrequencyCaps(redis, RedisKeys(f"bench-cap-{uuid.uuid4().hex[:8]}"))
    windows = parse_cap(spec).windows
    rule = CapRule(windows, max(w.seconds for w in windows))
    counted_only = CapRule((), rule.retention_s)
    people = [f"u:person-{i}" for i in range(chunk)]
    for h in range(history):  # what each person already received (never capped here)
        earlier = f"{h:024x}"
        await caps.admit(earlier, counted_only,
                         {p: [send_key(earlier, 0, i)] for i, p in enumerate(people)})
    check_ms, check_cpu_ms, release_ms = [], [], []
    for call in range(calls):
        campaign = f"{10_000 + call:024x}"
        sends = {p: [send_key(campaign, 0, i)] for i, p in enumerate(people)}
        cpu, started = await redis_cpu_s(redis), time.perf_counter()
        await caps.admit(campaign, rule, sends)
        check_ms.append(1000 * (time.perf_counter() - started))
        check_cpu_ms.append(1000 * (await redis_cpu_s(redis) - cpu))
        started = time.perf_counter()
        await caps.release(sends)  # as if FCM refused the whole chunk: history stays as it was
        release_ms.append(1000 * (time.perf_counter() - started))
    await redis.delete(*[caps.key(p) for p in people])
    return {"check_ms": statistics.median(check_ms),
            "check_redis_cpu_ms": statistics.median(check_cpu_ms),
            "release_ms": statistics.median(release_ms)}


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    redis = Redis.from_url(args.redis_url)
    rows = []
    try:
        for spec in args.caps:
            for history in args.history:
                figures = await measure(redis, spec, history, args.chunk, args.calls)
                rows.append({"cap": spec, "history": history, **figures})
    finally:
        await redis.aclose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--caps", nargs="+", default=["3/24h", "1/1h,3/24h,10/7d"])
    parser.add_argument("--history", type=int, nargs="+", default=[0, 2, 9])
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    print(format_table(
        ("cap", "campaigns each person holds", "check (ms)", "Redis CPU per check (ms)",
         "release (ms)"),
        [(r["cap"], str(r["history"]), f"{r['check_ms']:.2f}",
          f"{r['check_redis_cpu_ms']:.2f}", f"{r['release_ms']:.2f}") for r in rows]))
    write_json(results_path("frequency_cap"), {
        "source_version": source_version(), "machine": machine(["redis"]),
        "chunk": args.chunk, "calls": args.calls, "rows": rows})


if __name__ == "__main__":
    main()
