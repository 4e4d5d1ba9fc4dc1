"""What ``bench.http2`` prints and records: per latency, the median of each row's runs, the ratio
of its CPU per request to the ``aiohttp-tls`` run of the same round, and every run as JSON."""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common import format_table, machine, write_json
from bench.http2.measure import Measurement
from bench.http2.rows import BASELINE, ROWS

COLUMNS = ("row", "HTTP", "connections", "in flight (max)", "msg/s", "CPU-ms/request",
           f"CPU x {BASELINE}", "client CPU", "server CPU", "others")
"""``connections``: held by the row's process at the end of its window; ``in flight (max)``:
the most requests the stand-in had at once (the emulator does not count it: the row's
bound); ``others``: the most CPU other work took of the row's CPU / the server's CPU in a run."""
LEFT_COLUMNS = 2
PACKAGES = ("aiohttp", "httpx", "httpcore", "h2", "niquests", "urllib3-future", "hypercorn",
            "uvloop", "cryptography")


@dataclass(frozen=True)
class Run:
    latency_ms: float
    index: int
    load_average: float
    """1-minute load average when the round of rows this run belongs to started."""
    measurement: Measurement
    server: dict[str, Any]
    """The server's own counts for the row: requests, and for the stand-in the most in flight
    at once and the client connections seen."""


def ratio(run: Run, runs: Sequence[Run]) -> float | None:
    """CPU per request against the baseline row's run of the same round."""
    base = next((r for r in runs if r.measurement.row == BASELINE
                 and (r.latency_ms, r.index) == (run.latency_ms, run.index)), None)
    if base is None:
        return None
    return run.measurement.cpu_ms_per_request / base.measurement.cpu_ms_per_request


def tables(runs: Sequence[Run], rows: Sequence[str]) -> str:
    out = []
    for latency_ms in dict.fromkeys(run.latency_ms for run in runs):  # in --latency-ms order
        at = [run for run in runs if run.latency_ms == latency_ms]
        loads = [run.load_average for run in at]
        out.append(f"\nFCM stand-in {latency_ms:g} ms away, {max(r.index for r in at) + 1} "
                   f"alternating runs, medians; load average {min(loads):.1f}-{max(loads):.1f}\n")
        out.append(format_table(COLUMNS, [table_row(name, at) for name in rows], LEFT_COLUMNS))
    return "\n".join(out)


def table_row(name: str, runs: Sequence[Run]) -> tuple[str, ...]:
    mine = [run for run in runs if run.measurement.row == name]
    m = [run.measurement for run in mine]
    ratios = [r for r in (ratio(run, runs) for run in mine) if r is not None]
    in_flight = [run.server.get("max_in_flight") for run in mine]
    return (name, ROWS[name].http_version,
            f"{median(x.connections for x in m):.0f}",
            f"{median(in_flight):.0f}" if None not in in_flight else f"<={m[0].in_flight}",
            f"{median(x.per_s for x in m):,.0f}",
            f"{median(x.cpu_ms_per_request for x in m):.3f}",
            f"{median(ratios):.2f}" if ratios else "n/a",
            f"{median(x.cpu_s / x.seconds for x in m):.0%}",
            f"{median(x.server_cpu_s / x.seconds for x in m):.0%}",
            others(m))


def median(values: Any) -> float:
    return float(statistics.median(list(values)))


def others(measurements: Sequence[Measurement]) -> str:
    """The most other work took of the row's CPU and of the server's CPU in any run."""
    shares = [tuple(max(0.0, s / m.seconds) for s in m.others_cpu_s)
              for m in measurements if m.others_cpu_s is not None]
    if not shares:
        return "n/a"
    return f"{max(s[0] for s in shares):.0%}/{max(s[1] for s in shares):.0%}"


def installed(packages: Sequence[str]) -> list[str]:
    """``packages`` less those not installed (niquests is optional)."""
    found = []
    for name in packages:
        with contextlib.suppress(metadata.PackageNotFoundError):
            metadata.version(name)
            found.append(name)
    return found


def write_record(path: Path, runs: Sequence[Run], args: argparse.Namespace,
                 cpus: tuple[int | None, int | None], source: str) -> None:
    write_json(path, {
        "bench": "http2", "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source, "machine": machine(installed(PACKAGES)), "baseline": BASELINE,
        "settings": {"latency_ms": args.latency_ms, "runs": args.runs, "seconds": args.seconds,
                     "warmup_s": args.warmup, "concurrency": args.concurrency,
                     "max_streams": args.max_streams, "client_cpu": cpus[0],
                     "server_cpu": cpus[1]},
        "rows": {name: ROWS[name].what for name in args.rows},
        "runs": [{"latency_ms": run.latency_ms, "run": run.index + 1,
                  "load_average": run.load_average, **asdict(run.measurement),
                  "messages_per_s": round(run.measurement.per_s, 1),
                  "cpu_ms_per_request": round(run.measurement.cpu_ms_per_request, 4),
                  "cpu_ratio_to_baseline": ratio(run, runs), "server": run.server}
                 for run in runs]})
