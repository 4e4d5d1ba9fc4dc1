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

Issue 12's scenarios: ``--when paging`` cancels as soon as the dispatcher has published a first
chunk (with ``--devices 50000`` the dispatcher is still paging, paused by backpressure);
``--when sending`` (the default) once ``--under-way`` recipients are sent, both senders
mid-batch; ``--latency-ms 50`` puts FCM at a real round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import results_path, write_json
from bench.stack import (
    BenchStack,
    Campaign,
    create_campaign,
    import_devices,
    running_stack,
    wait_for_campaign,
)
from herald.domain.access import SYSTEM
from herald.runtime.resources import Resources
from herald.service_layer.stopping import Decider, Settler
from herald.settings import Settings

MODES = ("broadcast", "flag-only")
DEVICES = 20_000
LATENCY_MS = 20
UNDER_WAY = 1_500
POLL_S = 0.05
WAIT_TIMEOUT_S = 60.0


def _devices(count: int) -> list[dict[str, Any]]:
    return [{"token": f"bench-{i:06d}-" + "x" * 140, "platform": "android"} for i in range(count)]


@dataclass(frozen=True)
class Scenario:
    latency_ms: int
    when: str
    under_way: int
    devices: int

    def ready_to_cancel(self, campaign: Campaign) -> bool:
        counts = campaign["counts"]
        if self.when == "paging":  # senders at work, the dispatcher not done paging
            return bool(counts["sent"] > 0 and counts["targeted"] < self.devices)
        return bool(counts["sent"] >= self.under_way)


class Bench:
    def __init__(self, bench: BenchStack) -> None:
        self.api = bench.api
        self.emulator = bench.emulator
        config = bench.stack.config
        self.settings = Settings(mongodb_url=config.mongodb_url, rabbitmq_url=config.rabbitmq_url,
                                 redis_url=config.redis_url, fcm_endpoint=config.fcm_url)

    def run_once(self, mode: str, scenario: Scenario) -> dict[str, float]:
        self.emulator.reset()
        self.emulator.configure(latency_ms=scenario.latency_ms)
        campaign_id = create_campaign(self.api, {"title": "t", "body": "b"})
        self._wait(campaign_id, scenario.ready_to_cancel, "ready to cancel")
        returned = self._cancel(mode, campaign_id)
        campaign = self._wait(campaign_id, lambda c: c["status"] == "cancelled", "cancelled")
        received = self.emulator.received()
        cancel = campaign["cancel"]
        counts = campaign["counts"]
        if counts["sent"] + counts["failed"] + counts["unsent"] != counts["targeted"]:
            raise RuntimeError(f"cancelled counts do not add up: {counts}")
        confirmed = (datetime.fromisoformat(cancel["acknowledged_at"])
                     - datetime.fromisoformat(cancel["requested_at"])).total_seconds()
        return {"stop_ms": 1000 * (max(r.received_at for r in received) - returned),
                "confirmed_ms": 1000 * confirmed,
                "started_after_return": sum(r.received_at > returned for r in received),
                "sent_before_cancel": campaign["counts"]["sent"],
                "targeted": campaign["counts"]["targeted"]}

    def _cancel(self, mode: str, campaign_id: str) -> float:
        if mode == "broadcast":
            self.api.post(f"/v1/campaigns/{campaign_id}/cancel").raise_for_status()
        else:
            asyncio.run(self._flag_only(campaign_id))
        return time.time()

    async def _flag_only(self, campaign_id: str) -> None:
        resources = Resources.build("bench", self.settings)
        settler = Settler(resources.stores, resources.registry, "bench")
        decider = Decider(resources.stores, resources.flags, resources.registry, None,
                          settler.settle)
        await decider.cancel(campaign_id, "bench", SYSTEM)
        await resources.shutdown()

    def _wait(self, campaign_id: str, reached: Callable[[Campaign], bool], what: str) -> Campaign:
        return wait_for_campaign(self.api, campaign_id, reached,
                                 f"campaign {campaign_id} {what}", WAIT_TIMEOUT_S, POLL_S)


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
    parser.add_argument("--devices", type=int, default=DEVICES)
    parser.add_argument("--latency-ms", type=int, default=LATENCY_MS)
    parser.add_argument("--when", choices=("sending", "paging"), default="sending")
    parser.add_argument("--under-way", type=int, default=UNDER_WAY,
                        help="recipients sent before the cancel (--when sending)")
    parser.add_argument("--output", type=Path, default=results_path("cancel_latency.json"))
    args = parser.parse_args()
    with running_stack(senders=2, api_timeout_s=60) as stack:
        import_devices(stack.api, _devices(args.devices))
        bench = Bench(stack)
        scenario = Scenario(args.latency_ms, args.when, args.under_way, args.devices)
        samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for _ in range(args.runs):
            for mode in MODES:
                samples[mode].append(bench.run_once(mode, scenario))
    summary = summarize(samples)
    print_table(summary)
    write_json(args.output, {"bench": "cancel_latency", "summary": summary, "samples": samples,
                             "emulator_latency_ms": args.latency_ms, "devices": args.devices,
                             "when": args.when, "under_way": args.under_way})


if __name__ == "__main__":
    main()
