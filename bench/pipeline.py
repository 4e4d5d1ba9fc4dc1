"""The whole pipeline on this machine: ``python -m bench.pipeline``

A private local stack (nx-27017, the FCM emulator, api, dispatcher and ``--senders`` senders, as
separate processes, exactly as ``make up`` runs them) sends campaigns to ``--devices`` devices;
each run is timed from the campaign's own record (claimed by a dispatcher → completed), and the
CPU every process spent is read from ``/proc``, to show where a 2-core machine's time goes.

Baseline, side by side in the same run: the source system's design (seed 000), one worker that
pages the audience from MongoDB and sends chunks of 500 with firebase-admin's
``send_each_async``, one chunk after another, to the same emulator. Its 2-second pause between
chunks is left out: the baseline row measures what that design can do at best, not its pacing
(500 per 2 s = 250/s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from firebase_admin import messaging
from pymongo import AsyncMongoClient

from bench.common import process_cpu_s, results_path, write_json
from bench.fcm_sdk import close_app, open_app
from bench.stack import (
    BenchStack,
    create_campaign,
    import_devices,
    running_stack,
    wait_for_campaign,
)
from devstack.queue_depth import QueueDepthSampler
from devstack.stack import Stack

CHUNK = 500
FINISHED = ("completed", "failed", "cancelled")
CAMPAIGN_TIMEOUT_S = 3600.0
"""A campaign that has not ended in an hour is stuck, not slow: the bench stops instead of hanging."""
POLL_S = 0.1


def process_cpu(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of every stack process (RabbitMQ and Redis are shared: not counted)."""
    cpu = {}
    for name, process in stack.processes.items():
        try:
            cpu[name] = process_cpu_s(process.pid)
        except FileNotFoundError:
            continue
    return cpu


def devices(count: int) -> list[dict[str, Any]]:
    return [{"token": f"pipe-{i:07d}-" + "x" * 140, "user_id": f"u{i}", "platform": "android"}
            for i in range(count)]


def run_herald(bench: BenchStack, latency_ms: int) -> dict[str, Any]:
    bench.emulator.reset()
    bench.emulator.configure(latency_ms=latency_ms)
    before = process_cpu(bench.stack)
    with QueueDepthSampler(bench.stack) as depth:
        campaign_id = create_campaign(bench.api, {
            "title": "Bench", "body": "Pipeline", "data": {"landingUrl": "https://example.com"}})
        campaign = wait_for_campaign(bench.api, campaign_id, lambda c: c["status"] in FINISHED,
                                     f"campaign {campaign_id} to end", CAMPAIGN_TIMEOUT_S, POLL_S)
    after = process_cpu(bench.stack)
    started = datetime.fromisoformat(campaign["started_at"])
    finished = datetime.fromisoformat(campaign["finished_at"])
    seconds = (finished - started).total_seconds()
    accepted = bench.emulator.stats()["by_error"].get("OK", 0)
    if campaign["status"] != "completed" or accepted != campaign["counts"]["sent"]:
        raise RuntimeError(f"run did not complete cleanly: {campaign['status']}, {accepted}")
    return {"recipients": campaign["counts"]["targeted"], "seconds": seconds,
            "per_s": campaign["counts"]["targeted"] / seconds,
            "max_ready_chunks": max(depth.depths, default=0), "depth_samples": len(depth.depths),
            "cpu_s": {name: round(after[name] - before.get(name, 0.0), 2) for name in after}}


async def run_baseline(mongodb_url: str, endpoint: str, recipients: int) -> dict[str, Any]:
    """Seed 000's worker: page the audience, then send it chunk after chunk with the SDK."""
    warnings.filterwarnings("ignore", "Message.token is deprecated")  # tokens still work
    app = open_app(endpoint, "bench", "baseline")
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_url)
    started = time.perf_counter()
    cursor = client.get_default_database()["devices"].find(
        {"push_enabled": True, "invalid": False}, {"token": 1}).sort("_id", 1).limit(recipients)
    tokens = [device["token"] async for device in cursor]
    sent = 0
    for start in range(0, len(tokens), CHUNK):
        batch = [messaging.Message(token=t, notification=messaging.Notification("Bench", "Pipeline"),
                                   data={"landingUrl": "https://example.com"})
                 for t in tokens[start:start + CHUNK]]
        sent += (await messaging.send_each_async(batch, app=app)).success_count
    seconds = time.perf_counter() - started
    await client.close()
    await close_app(app)
    return {"recipients": sent, "seconds": seconds, "per_s": sent / seconds}


def table(herald: list[dict[str, Any]], baseline: dict[str, Any], senders: int) -> str:
    median = statistics.median(r["per_s"] for r in herald)
    rows = [
        "| row | recipients | seconds | recipients/s | x baseline | max chunks ready |",
        "|---|---:|---:|---:|---:|---:|",
        f"| baseline: one worker, firebase-admin, chunks of 500 (seed 000, no pacing) | "
        f"{baseline['recipients']:,} | {baseline['seconds']:.2f} | {baseline['per_s']:,.0f} | 1.0 | |",
    ]
    for index, run in enumerate(herald, 1):
        rows.append(f"| Herald run {index}: api, dispatcher, {senders} senders | "
                    f"{run['recipients']:,} | {run['seconds']:.2f} | {run['per_s']:,.0f} | "
                    f"{run['per_s'] / baseline['per_s']:.1f} | {run['max_ready_chunks']} |")
    rows.append(f"| Herald median | | | {median:,.0f} | {median / baseline['per_s']:.1f} | |")
    return "\n".join(rows)


def cpu_table(run: dict[str, Any]) -> str:
    total = sum(run["cpu_s"].values())
    lines = ["| process | CPU seconds | share |", "|---|---:|---:|"]
    for name, seconds in sorted(run["cpu_s"].items(), key=lambda item: -item[1]):
        lines.append(f"| {name} | {seconds:.2f} | {seconds / total:.0%} |")
    lines.append(f"| all (over {run['seconds']:.1f} s on 2 cores) | {total:.2f} | "
                 f"{total / (2 * run['seconds']):.0%} of the machine |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=40_000)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-recipients", type=int, default=5_000)
    parser.add_argument("--latency-ms", type=int, default=0,
                        help="FCM emulator latency for Herald's runs (the baseline runs at 0)")
    parser.add_argument("--output", type=Path, default=results_path("pipeline.json"))
    args = parser.parse_args()
    with running_stack(senders=args.senders, api_timeout_s=120) as bench:
        import_devices(bench.api, devices(args.devices))
        herald = [run_herald(bench, args.latency_ms) for _ in range(args.runs)]
        bench.emulator.reset()
        bench.emulator.configure(latency_ms=0)
        config = bench.stack.config
        baseline = asyncio.run(run_baseline(config.mongodb_url, config.fcm_url,
                                            args.baseline_recipients))
    print(table(herald, baseline, args.senders))
    print()
    print(cpu_table(herald[-1]))
    write_json(args.output, {"bench": "pipeline", "devices": args.devices,
                             "latency_ms": args.latency_ms,
                             "senders": args.senders, "herald": herald, "baseline": baseline})


if __name__ == "__main__":
    main()
