"""Does a campaign send as fast at its end as at its start? ``python -m bench.size_throughput``

Issue 33, point 2: the last 10% of a large campaign must send at >= 90% of the rate of its first
50%. A private local stack (nx-27017, the FCM emulator answering ``--latency-ms`` late, api,
dispatcher, ``--senders`` senders) sends one campaign to ``--devices`` devices (152-character
tokens, as in ``bench.cpu_per_recipient``). The campaign's counts are read every
``--interval-s``, with the CPU seconds nx-27017 and the senders have used so far (``/proc``).

The baseline is the campaign's own first half, in the same run: the report gives, for the first
50% and the last 10% of the recipients, the rate (outcomes per second) and the database's and
the senders' CPU milliseconds per recipient, and the ratio last / first. A rate that falls while
the database's CPU per recipient rises is a query that grows with the records (issue 33 found
the per-chunk lookup of recorded outcomes scanning the deliveries on nx-27017).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    format_table,
    machine,
    process_cpu_s,
    results_path,
    source_version,
    write_json,
)
from bench.cpu_per_recipient import PLAIN_CONTENT, devices
from bench.stack import create_campaign, fetch_campaign, import_devices, running_stack
from devstack.stack import Stack

FINISHED = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Sample:
    at_s: float
    done: int
    database_cpu_s: float
    senders_cpu_s: float


@dataclass(frozen=True)
class Segment:
    name: str
    recipients: int
    seconds: float
    rate_per_s: float
    database_cpu_ms_per_recipient: float
    senders_cpu_ms_per_recipient: float


def _cpu_s(stack: Stack, names: list[str]) -> float:
    return sum(process_cpu_s(stack.processes[name].pid) for name in names)


def watch(stack: Stack, api: Any, campaign_id: str, senders: int, interval_s: float,
          timeout_s: float) -> tuple[list[Sample], dict[str, Any]]:
    """The campaign's outcomes and the CPU used so far, every ``interval_s`` until it ends."""
    sender_names = [f"sender-{n}" for n in range(1, senders + 1)]
    started = time.monotonic()
    samples: list[Sample] = []
    while time.monotonic() - started < timeout_s:
        campaign = fetch_campaign(api, campaign_id)
        counts = campaign["counts"]
        samples.append(Sample(time.monotonic() - started, counts["sent"] + counts["failed"],
                              _cpu_s(stack, ["mongodb"]), _cpu_s(stack, sender_names)))
        if campaign["status"] in FINISHED:
            return samples, campaign
        time.sleep(interval_s)
    raise TimeoutError(f"campaign {campaign_id} did not end in {timeout_s} s")


def _first_reaching(samples: list[Sample], done: float) -> Sample:
    return next(s for s in samples if s.done >= done)


def segment(name: str, samples: list[Sample], start: float, end: float) -> Segment:
    """The samples between the first that reached ``start`` recipients and the first that
    reached ``end``."""
    first, last = _first_reaching(samples, start), _first_reaching(samples, end)
    recipients = max(1, last.done - first.done)
    seconds = max(1e-9, last.at_s - first.at_s)
    return Segment(name, recipients, seconds, recipients / seconds,
                   1000 * (last.database_cpu_s - first.database_cpu_s) / recipients,
                   1000 * (last.senders_cpu_s - first.senders_cpu_s) / recipients)


def report(segments: list[Segment]) -> str:
    first, last = segments
    rows = [(s.name, f"{s.recipients:,}", f"{s.seconds:.1f}", f"{s.rate_per_s:,.0f}",
             f"{s.database_cpu_ms_per_recipient:.3f}", f"{s.senders_cpu_ms_per_recipient:.3f}")
            for s in segments]
    rows.append(("last / first", "", "", _ratio(last.rate_per_s, first.rate_per_s),
                 _ratio(last.database_cpu_ms_per_recipient, first.database_cpu_ms_per_recipient),
                 _ratio(last.senders_cpu_ms_per_recipient, first.senders_cpu_ms_per_recipient)))
    return format_table(("part of the campaign", "recipients", "s", "outcomes / s",
                         "nx-27017 CPU ms / recipient", "senders CPU ms / recipient"), rows)


def _ratio(last: float, first: float) -> str:
    return f"{last / first:.2f}" if first else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=200_000)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--interval-s", type=float, default=0.25)
    parser.add_argument("--output", type=Path, default=results_path("size_throughput.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    with running_stack(senders=args.senders, api_timeout_s=300) as bench:
        imported_at = time.monotonic()
        import_devices(bench.api, devices(args.devices))
        import_s = time.monotonic() - imported_at
        bench.emulator.reset()
        bench.emulator.configure(latency_ms=args.latency_ms)
        campaign_id = create_campaign(bench.api, PLAIN_CONTENT)
        samples, campaign = watch(bench.stack, bench.api, campaign_id, args.senders,
                                  args.interval_s, timeout_s=3600)
    if campaign["status"] != "completed" or samples[-1].done != args.devices:
        raise RuntimeError(f"campaign did not complete cleanly: {campaign}")
    segments = [segment("first 50%", samples, 1, 0.5 * args.devices),
                segment("last 10%", samples, 0.9 * args.devices, args.devices)]
    load_after = os.getloadavg()
    print(f"{args.devices:,} devices, {args.senders} senders, FCM stand-in {args.latency_ms} ms, "
          f"import {import_s:.0f} s, campaign {samples[-1].at_s:.0f} s; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; {source_version()}")
    print(report(segments))
    write_json(args.output, {"bench": "size_throughput", "devices": args.devices,
                             "senders": args.senders, "latency_ms": args.latency_ms,
                             "import_s": import_s, "load_before": load_before,
                             "load_after": load_after, "source": source_version(),
                             "machine": machine(["pymongo", "nx-27017"]),
                             "segments": [asdict(s) for s in segments],
                             "samples": [asdict(s) for s in samples]})


if __name__ == "__main__":
    main()
