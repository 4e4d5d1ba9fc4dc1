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

``--personal`` adds a row to each run (issue 25): the same devices (each with a locale and two
attributes) sent a campaign with two placeholders in its title and two in its body and two
translations (``bench.personalize``'s content), so that the dispatcher copies each device's
profile into its chunk and the sender renders each recipient's message. The sender's own CPU
is reported beside the total of the three processes.
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

from bench import personalize
from bench.common import process_cpu_s, results_path, write_json
from bench.stack import create_campaign, import_devices, running_stack, wait_for_campaign
from devstack.stack import Stack
from herald.domain.payload import MessageTemplate, build_payload, default_replace_key

HERALD_PROCESSES = ("api", "dispatcher", "sender-1")
FINISHED = ("completed", "failed", "cancelled")
IN_FLIGHT = 256
TITLE, BODY = "Bench", "CPU per recipient"


LOCALES = ("es-MX", "es", "pt-BR", "en-US", "fr-FR", "de", None)


def devices(count: int) -> list[dict[str, Any]]:
    """Every device has a locale (most) and attributes; a plain campaign reads neither."""
    return [{"token": f"cpu-{i:07d}-" + "x" * 140, "user_id": f"u{i}", "platform": "android",
             **({"locale": locale} if (locale := LOCALES[i % len(LOCALES)]) else {}),
             "attributes": {"first_name": f"Name{i}", "city": "Lisbon"} if i % 3 else {}}
            for i in range(count)]


PLAIN_CONTENT = {"title": TITLE, "body": BODY}
PERSONAL_CONTENT = {
    "title": personalize.PERSONAL[0], "body": personalize.PERSONAL[1],
    "data": personalize.DATA,
    "translations": {tag: translation.model_dump()
                     for tag, translation in personalize.PERSONAL_TRANSLATIONS.items()}}


def herald_cpu_s(stack: Stack, names: tuple[str, ...] = HERALD_PROCESSES) -> float:
    return sum(process_cpu_s(stack.processes[name].pid) for name in names)


def run_herald(stack: Stack, api: Any, count: int,
               content: dict[str, Any] | None = None) -> dict[str, float]:
    before, sender_before = herald_cpu_s(stack), herald_cpu_s(stack, ("sender-1",))
    started = time.monotonic()
    campaign_id = create_campaign(api, content or PLAIN_CONTENT)
    campaign = wait_for_campaign(api, campaign_id, lambda c: c["status"] in FINISHED,
                                 f"campaign {campaign_id} to end", 1800, 0.2)
    cpu_s = herald_cpu_s(stack) - before
    sender_s = herald_cpu_s(stack, ("sender-1",)) - sender_before
    if campaign["status"] != "completed" or campaign["counts"]["sent"] != count:
        raise RuntimeError(f"campaign did not complete cleanly: {campaign}")
    return {"recipients": count, "cpu_s": cpu_s, "seconds": time.monotonic() - started,
            "cpu_ms_per_recipient": 1000 * cpu_s / count,
            "sender_cpu_ms_per_recipient": 1000 * sender_s / count}


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
    parser.add_argument("--personal", action="store_true",
                        help="also a personalised, translated campaign in each run (issue 25)")
    parser.add_argument("--output", type=Path, default=results_path("cpu_per_recipient.json"))
    args = parser.parse_args()
    runs: list[tuple[dict[str, float], dict[str, float]]] = []
    personal: list[dict[str, float]] = []
    with running_stack(senders=1, api_timeout_s=120) as bench:
        import_devices(bench.api, devices(args.devices))
        for _ in range(args.runs):
            bench.emulator.reset()
            bench.emulator.configure(latency_ms=args.latency_ms)
            herald = run_herald(bench.stack, bench.api, args.devices)
            if args.personal:
                bench.emulator.reset()
                bench.emulator.configure(latency_ms=args.latency_ms)
                personal.append(run_herald(bench.stack, bench.api, args.devices,
                                           PERSONAL_CONTENT))
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
    if personal:
        _report_personal([h for h, _ in runs], personal)
    write_json(args.output, {"bench": "cpu_per_recipient", "latency_ms": args.latency_ms,
                             "recipients": args.devices,
                             "runs": [{"herald": h, "baseline": b} for h, b in runs],
                             "personal_runs": personal,
                             "median_ms": {"herald": median_herald, "baseline": median_baseline},
                             "ratio": ratio})


def _report_personal(plain: list[dict[str, float]], personal: list[dict[str, float]]) -> None:
    """Plain against personalised content, run by run: all three processes, and the sender."""
    print("\n| run | plain: Herald / sender CPU ms per recipient | placeholders + translations:"
          " Herald / sender | x plain (Herald / sender) |")
    print("|---|---:|---:|---:|")
    rows = [*zip(plain, personal, strict=True)]
    for number, (a, b) in enumerate(rows, 1):
        print(f"| {number} | {_pair(a)} | {_pair(b)} | "
              f"{b['cpu_ms_per_recipient'] / a['cpu_ms_per_recipient']:.2f} / "
              f"{b['sender_cpu_ms_per_recipient'] / a['sender_cpu_ms_per_recipient']:.2f} |")
    medians = [{key: statistics.median(r[key] for r in group) for key in
                ("cpu_ms_per_recipient", "sender_cpu_ms_per_recipient")}
               for group in (plain, personal)]
    total, sender = (medians[1][key] / medians[0][key] for key in
                     ("cpu_ms_per_recipient", "sender_cpu_ms_per_recipient"))
    print(f"| median | {_pair(medians[0])} | {_pair(medians[1])} | {total:.2f} / {sender:.2f} |")


def _pair(run: dict[str, float]) -> str:
    return f"{run['cpu_ms_per_recipient']:.3f} / {run['sender_cpu_ms_per_recipient']:.3f}"


def _ratio(herald: dict[str, float], baseline: dict[str, float]) -> float:
    return herald["cpu_ms_per_recipient"] / baseline["cpu_ms_per_recipient"]


if __name__ == "__main__":
    main()
