"""What the bench says about its runs: the median of the clean runs of each row, the Markdown table
on stdout, the warnings that weaken the numbers, and the full JSON record."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.common import format_table, machine, source_version, write_json
from bench.transport.records import DISTURBED_SHARE, Measurement, Runs
from bench.transport.rows import BASELINE, ROWS

COLUMNS = ("row", "loop", "in flight", "messages", "seconds", "msg/s", "msg/s range", "x baseline",
           "CPU-s/1k msg", "client CPU", "emulator CPU", "others", "clean runs")
LEFT_COLUMNS = 3
PACKAGES = ("firebase-admin", "httpx", "httpcore", "aiohttp", "uvloop", "orjson", "redis")
"""The libraries on the measured paths, whose versions go into the record."""


def counted(runs: Sequence[Measurement]) -> list[Measurement]:
    """The undisturbed runs (all runs if every one was disturbed), slowest first. Runs that other
    work measurably slowed say something about the machine, not about the transport."""
    clean = [run for run in runs if not run.disturbed] or list(runs)
    return sorted(clean, key=lambda m: m.per_s)


def median_run(runs: Sequence[Measurement]) -> Measurement:
    """The counted run with the median msg/s (the upper one of an even count): a real run, not a
    blend of several."""
    ordered = counted(runs)
    return ordered[len(ordered) // 2]


def baseline_of(runs: Runs) -> Measurement | None:
    return median_run(runs[BASELINE]) if BASELINE in runs else None


def disturbed(runs: Runs) -> list[str]:
    """Rows without a single undisturbed run: their msg/s understates the transport."""
    return [name for name, row_runs in runs.items() if median_run(row_runs).disturbed]


def table(runs: Runs) -> str:
    """A Markdown table, readable in a terminal and pasteable into the README."""
    return format_table(COLUMNS, table_rows(runs), LEFT_COLUMNS)


def table_rows(runs: Runs) -> list[tuple[str, ...]]:
    baseline = baseline_of(runs)
    return [table_row(row_runs, baseline) for row_runs in runs.values()]


def table_row(row_runs: Sequence[Measurement], baseline: Measurement | None) -> tuple[str, ...]:
    m = median_run(row_runs)
    ordered = counted(row_runs)
    spread = f"{ordered[0].per_s:,.0f}-{ordered[-1].per_s:,.0f}"
    return (m.row, m.loop, m.in_flight, f"{m.messages:,}", f"{m.seconds:.2f}",
            f"{m.per_s:,.0f}", spread if len(row_runs) > 1 else "",
            f"{m.per_s / baseline.per_s:.1f}" if baseline else "n/a",
            f"{m.cpu_s_per_1k:.3f}", f"{m.cpu_s / m.seconds:.0%}",
            f"{m.emulator_cpu_s / m.seconds:.0%}", others(m),
            f"{sum(not r.disturbed for r in row_runs)}/{len(row_runs)}")


def others(measurement: Measurement) -> str:
    share = measurement.others_share
    if share is None:
        return "n/a"
    client, emulator = (max(0.0, value) for value in share)  # 10 ms ticks: can dip below zero
    return f"{client:.0%}/{emulator:.0%}"


def warn(runs: Runs, source: str) -> str:
    """Say what makes the numbers weaker; return the source version to record."""
    if noisy := disturbed(runs):
        print(f"\nwarning: other work used more than {DISTURBED_SHARE:.0%} of a pinned CPU during "
              f"{', '.join(noisy)}; their msg/s are understated, CPU-s/1k msg still holds. "
              "Rerun on a quiet machine.")
    if (now := source_version()) != source:
        print(f"\nwarning: the code changed during the run ({source} -> {now}): rows may have "
              "measured different code.")
        return f"{source} -> {now}"
    return source


def write_record(path: Path, runs: Runs, args: argparse.Namespace,
                 cpus: tuple[int | None, int | None], source: str) -> None:
    """Every run of every row, the settings, the machine and the commit measured, as JSON."""
    baseline = baseline_of(runs)
    rows = [{**median_run(row_runs).as_dict(baseline), "what": ROWS[name].what,
             "runs": [run.as_dict(baseline) for run in row_runs]}
            for name, row_runs in runs.items()]
    write_json(path, {
        "bench": "transport", "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source, "machine": machine(PACKAGES),
        "baseline": BASELINE if baseline else None,
        "settings": {"seconds": args.seconds, "warmup_s": args.warmup,
                     "concurrency": args.concurrency, "repeat": args.repeat,
                     "emulator_latency_ms": args.latency_ms, "wait_quiet_s": args.wait_quiet,
                     "client_cpu": cpus[0], "emulator_cpu": cpus[1]},
        "rows": rows})
