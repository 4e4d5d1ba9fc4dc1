"""How fast does a cancel stop every sender? ``python -m bench.cancel_latency``

A whole local stack (nx-27017, FCM emulator slowed to 20 ms per request, api, dispatcher, two
senders, as separate processes) sends a 20,000-device campaign again and again; each run cancels
it once it is well under way and measures, from the FCM emulator's own timestamps:

- **stop**: cancel call returned → the last FCM request that started (target p99 ≤ 250 ms);
- **confirmed**: cancel requested → campaign ``cancelled`` with final counts (every pod
  acknowledged), from the campaign's own record.

Two ways of cancelling run interleaved in the same run, so their ratio compares like with like:

- ``broadcast`` — Herald's API call: status change, Redis flag, and the ``herald.cancel`` fanout;
- ``flag-only`` (**baseline**) — seed 000's mechanism alone: the status change and the Redis flag,
  which workers re-read at their checkpoints (Herald's senders re-read it at most once a second
  per campaign; this is the path for pods that missed the broadcast).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from devstack.isolation import private_stack
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.adapters import mongo
from herald.adapters.redis import CancelFlags, PodRegistry
from herald.adapters.redis import connect as connect_redis
from herald.adapters.stores import Stores
from herald.names import RedisKeys
from herald.service_layer.cancellation import Cancellation
from herald.settings import Settings

MODES = ("broadcast", "flag-only")
DEVICES = 20_000
LATENCY_MS = 20
UNDER_WAY = 1_500
POLL_S = 0.05


def _devices() -> list[dict[str, Any]]:
    return [{"token": f"bench-{i:06d}-" + "x" * 140, "platform": "android"} for i in range(DEVICES)]


class Bench:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.api = httpx.Client(base_url=stack.config.api_url, timeout=60)
        self.emulator = EmulatorClient(stack.config.fcm_url)
        settings = Settings(mongodb_url=stack.config.mongodb_url,
                            rabbitmq_url=stack.config.rabbitmq_url,
                            redis_url=stack.config.redis_url, fcm_endpoint=stack.config.fcm_url)
        self.settings = settings

    def run_once(self, mode: str) -> dict[str, float]:
        self.emulator.reset()
        self.emulator.configure(latency_ms=LATENCY_MS)
        campaign_id = self.api.post("/v1/campaigns", json={"title": "t", "body": "b"}).json()["id"]
        self._wait(lambda: self._campaign(campaign_id)["counts"]["sent"] >= UNDER_WAY)
        returned = self._cancel(mode, campaign_id)
        self._wait(lambda: self._campaign(campaign_id)["status"] == "cancelled")
        campaign = self._campaign(campaign_id)
        received = self.emulator.received()
        cancel = campaign["cancel"]
        confirmed = (datetime.fromisoformat(cancel["acknowledged_at"])
                     - datetime.fromisoformat(cancel["requested_at"])).total_seconds()
        return {"stop_ms": 1000 * (max(r.received_at for r in received) - returned),
                "confirmed_ms": 1000 * confirmed,
                "started_after_return": sum(r.received_at > returned for r in received),
                "sent_before_cancel": campaign["counts"]["sent"]}

    def _cancel(self, mode: str, campaign_id: str) -> float:
        if mode == "broadcast":
            self.api.post(f"/v1/campaigns/{campaign_id}/cancel").raise_for_status()
        else:
            asyncio.run(self._flag_only(campaign_id))
        return time.time()

    async def _flag_only(self, campaign_id: str) -> None:
        client = mongo.connect(self.settings, "bench")
        redis = connect_redis(self.settings)
        keys = RedisKeys(self.settings.mongodb_database)
        cancellation = Cancellation(Stores.on(mongo.database(client, self.settings)),
                                    CancelFlags(redis, keys, 3600), PodRegistry(redis, keys, 6),
                                    bus=None, pod_id="bench")
        await cancellation.request(campaign_id, "bench", "bench", broadcast=False)
        await redis.aclose()
        await client.close()

    def _campaign(self, campaign_id: str) -> dict[str, Any]:
        return dict(self.api.get(f"/v1/campaigns/{campaign_id}").json())

    @staticmethod
    def _wait(condition: Any, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("the campaign did not get there in time")
            time.sleep(POLL_S)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summarize(samples: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    summary = {}
    for mode, runs in samples.items():
        stops = [r["stop_ms"] for r in runs]
        confirmed = [r["confirmed_ms"] for r in runs]
        summary[mode] = {"runs": len(runs), "stop_median_ms": statistics.median(stops),
                         "stop_p99_ms": _percentile(stops, 0.99), "stop_max_ms": max(stops),
                         "confirmed_median_ms": statistics.median(confirmed),
                         "confirmed_p99_ms": _percentile(confirmed, 0.99),
                         "max_started_after_return": max(r["started_after_return"] for r in runs)}
    return summary


def print_table(summary: dict[str, dict[str, float]]) -> None:
    base = summary["flag-only"]
    print("| mode | runs | stop median | stop p99 | confirmed median | confirmed p99 | "
          "requests started after the call returned (max) | p99 stop vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        row = summary[mode]
        print(f"| {mode} | {row['runs']} | {row['stop_median_ms']:.0f} ms | "
              f"{row['stop_p99_ms']:.0f} ms | {row['confirmed_median_ms']:.0f} ms | "
              f"{row['confirmed_p99_ms']:.0f} ms | {row['max_started_after_return']:.0f} | "
              f"{base['stop_p99_ms'] / row['stop_p99_ms']:.1f}x faster |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs per mode")
    parser.add_argument("--output", type=Path, default=Path("bench/results/cancel_latency.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir, private_stack(Path(run_dir)) as stack:
        stack.start(senders=2, schedulers=0)
        bench = Bench(stack)
        bench.api.post("/v1/devices/bulk", json={"devices": _devices()[:10_000]})
        bench.api.post("/v1/devices/bulk", json={"devices": _devices()[10_000:]})
        samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for _ in range(args.runs):
            for mode in MODES:
                samples[mode].append(bench.run_once(mode))
    summary = summarize(samples)
    print_table(summary)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"bench": "cancel_latency", "summary": summary,
                                       "samples": samples, "emulator_latency_ms": LATENCY_MS,
                                       "devices": DEVICES}, indent=2))


if __name__ == "__main__":
    main()
