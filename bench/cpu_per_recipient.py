"""What does one recipient cost Herald in CPU? ``python -m bench.cpu_per_recipient``

A private local stack (nx-27017, the FCM emulator answering ``--latency-ms`` late, api,
dispatcher and one sender, as separate processes) sends one campaign to ``--devices`` devices.
Herald's CPU is the user + system time, read from ``/proc/<pid>/stat``, that its own processes
(api, dispatcher, sender) spent from the campaign's creation to its completion; the stand-ins
(nx-27017, the emulator) and the shared RabbitMQ and Redis are left out.

Baseline, in the same run against the same emulator: a bare aiohttp client in its own process
posting the same number of requests (Herald's message body, 256 in flight, keep-alive), its CPU
from ``/proc/self/stat`` the same way, on the same event loop as Herald's processes (uvloop). The
two rows alternate ``--runs`` times; the table has each run and the medians. The ratio says
what Herald's pipeline (paging, queueing, claims, the window, recording, counting) adds to the
request itself. Issue 12's goal: <= 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

from bench.common import process_cpu_s, results_path, write_json
from bench.stack import create_campaign, import_devices, running_stack, wait_for_campaign
from devstack.stack import Stack
from herald.domain.payload import MessageTemplate, build_payload, default_replace_key

HERALD_PROCESSES = ("api", "dispatcher", "sender-1")
FINISHED = ("completed", "failed", "cancelled")
IN_FLIGHT = 256
TITLE, BODY = "Bench", "CPU per recipient"


def devices(count: int) -> list[dict[str, Any]]:
    return [{"token": f"cpu-{i:07d}-" + "x" * 140, "user_id": f"u{i}", "platform": "android"}
            for i in range(count)]


def herald_cpu_s(stack: Stack) -> float:
    return sum(process_cpu_s(stack.processes[name].pid) for name in HERALD_PROCESSES)


def run_herald(stack: Stack, api: Any, count: int) -> dict[str, float]:
    before = herald_cpu_s(stack)
    started = time.monotonic()
    campaign_id = create_campaign(api, {"title": TITLE, "body": BODY})
    campaign = wait_for_campaign(api, campaign_id, lambda c: c["status"] in FINISHED,
                                 f"campaign {campaign_id} to end", 1800, 0.2)
    cpu_s = herald_cpu_s(stack) - before
    if campaign["status"] != "completed" or campaign["counts"]["sent"] != count:
        raise RuntimeError(f"campaign did not complete cleanly: {campaign}")
    return {"recipients": count, "cpu_s": cpu_s, "seconds": time.monotonic() - started,
            "cpu_ms_per_recipient": 1000 * cpu_s / count}


def bare_aiohttp(url: str, count: int, result: Any, authorization: dict[str, str]) -> None:
    """In a child process: ``count`` requests, ``IN_FLIGHT`` at a time; its own CPU seconds."""
    before = process_cpu_s(os.getpid())
    sent = uvloop.run(_post_all(url, count, authorization))
    result.put((sent, process_cpu_s(os.getpid()) - before))


async def _post_all(url: str, count: int, authorization: dict[str, str]) -> int:
    template = MessageTemplate(build_payload(TITLE, BODY, {}, replace_key=default_replace_key("b")))
    bodies = [template.body_for(f"cpu-{i:07d}-" + "x" * 140) for i in range(count)]
    headers = {"Content-Type": "application/json", **authorization}
    connector = aiohttp.TCPConnector(limit=IN_FLIGHT)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker(first: int) -> int:
            ok = 0
            for body in bodies[first::IN_FLIGHT]:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    ok += response.status == 200
            return ok
        return sum(await asyncio.gather(*(worker(i) for i in range(IN_FLIGHT))))


def run_baseline(stack: Stack, count: int) -> dict[str, float]:
    url = f"{stack.config.fcm_url}/v1/projects/herald-local/messages:send"
    context = multiprocessing.get_context("spawn")
    result = context.Queue()
    child = context.Process(target=bare_aiohttp,
                            args=(url, count, result, stack.config.fcm_headers()))
    child.start()
    sent, cpu_s = result.get(timeout=1800)
    child.join()
    if sent != count:
        raise RuntimeError(f"the bare client got {sent} of {count} accepted")
    return {"recipients": count, "cpu_s": cpu_s, "cpu_ms_per_recipient": 1000 * cpu_s / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=results_path("cpu_per_recipient.json"))
    args = parser.parse_args()
    runs: list[tuple[dict[str, float], dict[str, float]]] = []
    with running_stack(senders=1, api_timeout_s=120) as bench:
        import_devices(bench.api, devices(args.devices))
        for _ in range(args.runs):
            bench.emulator.reset()
            bench.emulator.configure(latency_ms=args.latency_ms)
            herald = run_herald(bench.stack, bench.api, args.devices)
            bench.emulator.reset()
            bench.emulator.configure(latency_ms=args.latency_ms)
            runs.append((herald, run_baseline(bench.stack, args.devices)))
    print("| run | bare aiohttp, 256 in flight: CPU ms / recipient | Herald, api + dispatcher + "
          "1 sender, whole campaign: CPU ms / recipient | x baseline |")
    print("|---|---:|---:|---:|")
    for number, (herald, baseline) in enumerate(runs, 1):
        print(f"| {number} | {baseline['cpu_ms_per_recipient']:.3f} | "
              f"{herald['cpu_ms_per_recipient']:.3f} | {_ratio(herald, baseline):.2f} |")
    median_baseline = statistics.median(b["cpu_ms_per_recipient"] for _, b in runs)
    median_herald = statistics.median(h["cpu_ms_per_recipient"] for h, _ in runs)
    ratio = median_herald / median_baseline
    print(f"| median | {median_baseline:.3f} | {median_herald:.3f} | {ratio:.2f} |")
    write_json(args.output, {"bench": "cpu_per_recipient", "latency_ms": args.latency_ms,
                             "recipients": args.devices,
                             "runs": [{"herald": h, "baseline": b} for h, b in runs],
                             "median_ms": {"herald": median_herald, "baseline": median_baseline},
                             "ratio": ratio})


def _ratio(herald: dict[str, float], baseline: dict[str, float]) -> float:
    return herald["cpu_ms_per_recipient"] / baseline["cpu_ms_per_recipient"]


if __name__ == "__main__":
    main()
