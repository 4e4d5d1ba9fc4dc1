"""The bench's side of a measurement: round-robin over the rows, each against a freshly reset
emulator, optionally after waiting for a quiet machine, and judged by the emulator's own count."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import cpu_busy_s
from bench.transport.emulator import Emulator
from bench.transport.measure import in_child
from bench.transport.records import BenchError, Measurement, Plan, Runs

QUIET_SHARE = 0.05
QUIET_SAMPLE_S = 2.0
"""``--wait-quiet`` starts a run once both pinned CPUs were under 5% busy for 2 s."""


def measure_all(args: argparse.Namespace, emulator: Emulator, cpu: int | None) -> Runs:
    """Round-robin over the rows ``--repeat`` times, so a burst of other load or a slow drift
    spreads over every row instead of landing on one."""
    print(f"measuring {len(args.rows)} rows x {args.repeat}, {args.seconds:g} s each, "
          f"client on CPU {cpu}, emulator on CPU {emulator.cpu}", file=sys.stderr)
    runs: Runs = {name: [] for name in args.rows}
    for _ in range(args.repeat):
        for name in args.rows:
            runs[name].append(run_row(name, args, emulator, cpu))
    return runs


def run_row(name: str, args: argparse.Namespace, emulator: Emulator, cpu: int | None,
            profile_to: str | None = None) -> Measurement:
    """Measure row ``name`` once, in its own process on ``cpu``; the emulator must agree."""
    if args.wait_quiet and cpu is not None and emulator.cpu is not None:
        wait_for_quiet((cpu, emulator.cpu), args.wait_quiet)
    emulator.client.reset()
    if args.latency_ms:
        emulator.client.configure(latency_ms=args.latency_ms)
    plan = Plan(name, emulator.endpoint, args.seconds, args.warmup, args.concurrency,
                args.redis_url, emulator.pid, cpu, emulator.cpu, profile_to)
    measurement = in_child(plan)
    verify(measurement, emulator.client.stats())
    print(f"  {name:<26} {measurement.per_s:>9,.0f} msg/s  ({measurement.messages:,} verified)",
          file=sys.stderr)
    return measurement


def verify(measurement: Measurement, stats: dict[str, Any]) -> None:
    """The emulator is the judge: every request the row counted arrived, and all were accepted."""
    expected = measurement.requests_sent
    if stats["requests"] != expected or stats["by_error"] != {"OK": expected}:
        raise BenchError(f"{measurement.row}: sent {expected} requests, emulator saw "
                         f"{stats['requests']} {stats['by_error']}")


def wait_for_quiet(cpus: tuple[int, int], max_wait_s: float) -> None:
    """On a shared machine, wait (at most ``max_wait_s``) until other work leaves both pinned CPUs
    idle, so a run starts quiet; whether it stayed quiet shows in its "others" column."""
    started = time.monotonic()
    while True:
        before = [cpu_busy_s(cpu) for cpu in cpus]
        time.sleep(QUIET_SAMPLE_S)
        busy = max(cpu_busy_s(cpu) - b for cpu, b in zip(cpus, before, strict=True)) / QUIET_SAMPLE_S
        waited = time.monotonic() - started
        if busy < QUIET_SHARE or waited > max_wait_s:
            break
    if waited > QUIET_SAMPLE_S * 1.5:
        print(f"  (waited {waited:.0f} s for other work to leave the CPUs; now {busy:.0%} busy)",
              file=sys.stderr)
