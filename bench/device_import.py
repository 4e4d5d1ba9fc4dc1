"""Importing devices at scale: ``python -m bench.device_import`` (issue 33, point 5).

A private stack (nx-27017, the api, a dispatcher; no sender is needed) imports ``--devices``
devices three ways, each into an empty registry but the second:

- **import**: ``herald devices import FILE`` (the CLI, a process of its own) streaming an NDJSON
  file to ``POST /v1/devices/import``: every device new;
- **import again**: the first ``--again`` lines of the same file once more (all of it by
  default up to 50,000): every line unchanged, nothing written. Every batch of known tokens
  reads them back with one ``$in``, which nx-27017 answers by scanning the whole collection,
  so at a million devices the whole file again would take far longer than the import itself
  (``docs/known-gaps.md``);
- **baseline**: the route that existed before, ``POST /v1/devices/bulk`` in calls of 10,000
  (as ``bench.stack.import_devices`` and ``make demo`` call it), from this process.

Each row is timed from the first byte sent to the answer of the last call, checked (the api's
counts, and the registry holding exactly ``--devices`` devices), and shows the CPU the api,
nx-27017 and the client spent: on this 2-core machine the api and the database each have a core,
and whichever is busy all the time is the bound. The api's peak memory (``VmHWM``) after each
row shows whether a streamed body is held. Meanwhile another client reads a campaign page
(``GET /v1/campaigns?limit=1``) every 100 ms: its latencies show how long an import keeps other
calls waiting (issue 33, point 1: none more than 1 s). The registry is emptied (dropped, its
indexes made again) before the first and the last row.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from pymongo import MongoClient

from bench.common import format_table, machine, process_cpu_s, results_path, source_version, write_json
from bench.stack import BenchStack, running_stack
from devstack.stack import REPO, StackConfig
from herald import names
from herald.adapters.mongo import INDEXES

BULK_DEVICES = 10_000
"""Devices per ``POST /v1/devices/bulk`` call (the most it takes)."""
TIMEOUT_S = 3600.0
PROBE_EVERY_S = 0.1


@dataclass(frozen=True)
class Row:
    name: str
    seconds: float
    devices: int
    answer: dict[str, int]
    cpu_s: dict[str, float]
    api_peak_rss_mb: float
    load: tuple[float, float]
    read_ms: list[float]

    @property
    def per_s(self) -> float:
        return self.devices / self.seconds


def device_lines(count: int) -> Iterator[bytes]:
    """The devices of every row: a 150-character token, a user id, Android, opted in."""
    for i in range(count):
        yield orjson.dumps({"token": f"import-{i:07d}-" + "x" * 135, "user_id": f"u{i}",
                            "platform": "android", "marketing_enabled": True})


def write_file(path: Path, count: int) -> None:
    with path.open("wb") as out:
        for line in device_lines(count):
            out.write(line + b"\n")


def empty_registry(config: StackConfig) -> None:
    """Drop the devices and make their indexes again, as the services make them."""
    client: MongoClient[dict[str, Any]] = MongoClient(config.mongodb_url)
    with client:
        devices = client[config.database][names.DEVICES]
        devices.drop()
        for keys, options in INDEXES[names.DEVICES]:
            devices.create_index(keys, **options)


def registry_size(config: StackConfig) -> int:
    client: MongoClient[dict[str, Any]] = MongoClient(config.mongodb_url)
    with client:
        found = list(client[config.database][names.DEVICES].aggregate([{"$count": "n"}]))
    return int(found[0]["n"]) if found else 0


def cli_import(config: StackConfig, path: Path) -> dict[str, int]:
    """``herald devices import`` in a process of its own; the api's answer."""
    done = subprocess.run(
        [sys.executable, "-m", "herald_cli", "devices", "import", str(path), "--json",
         "--api", config.api_url], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO,
        env={**os.environ, "HERALD_API_KEY": config.api_key})
    if done.returncode != 0:
        raise RuntimeError(f"herald devices import failed ({done.returncode}): {done.stderr}")
    progress = done.stderr.strip().splitlines()
    print(f"  CLI progress: {len(progress)} lines on stderr, the last: {progress[-1]}",
          flush=True)
    return dict(orjson.loads(done.stdout))


def bulk_import(api: httpx.Client, count: int) -> dict[str, int]:
    """The baseline: ``POST /v1/devices/bulk`` in calls of ``BULK_DEVICES``."""
    created = updated = 0
    batch: list[bytes] = []
    for line in device_lines(count):
        batch.append(line)
        if len(batch) == BULK_DEVICES:
            created, updated = _bulk_call(api, batch, created, updated)
            batch = []
    if batch:
        created, updated = _bulk_call(api, batch, created, updated)
    return {"inserted": created, "updated": updated}


def _bulk_call(api: httpx.Client, batch: list[bytes], created: int,
               updated: int) -> tuple[int, int]:
    body = b'{"devices": [' + b",".join(batch) + b"]}"
    response = api.post("/v1/devices/bulk", content=body,
                        headers={"Content-Type": "application/json"})
    response.raise_for_status()
    answer = response.json()
    return created + answer["created"], updated + answer["updated"]


def _client_cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ReadProbe:
    """Reads a campaign page every ``PROBE_EVERY_S`` in a thread of its own; the latencies."""

    def __init__(self, config: StackConfig) -> None:
        self.latencies_ms: list[float] = []
        self._stop = threading.Event()
        self._client = httpx.Client(base_url=config.api_url, headers=config.api_headers(),
                                    timeout=60)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReadProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(PROBE_EVERY_S):
            started = time.perf_counter()
            self._client.get("/v1/campaigns", params={"limit": 1}).raise_for_status()
            self.latencies_ms.append((time.perf_counter() - started) * 1000)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def measure(bench: BenchStack, name: str, count: int, run: Callable[[], dict[str, int]],
            expected: dict[str, int], stored: int | None = None) -> Row:
    """Run one row; fail unless the answer is ``expected`` and the registry then holds
    ``stored`` devices (``count`` if None)."""
    processes = {"api": bench.stack.processes["api"].pid,
                 "nx-27017": bench.stack.processes["mongodb"].pid}
    before = {label: process_cpu_s(pid) for label, pid in processes.items()}
    client_before, load_before = _client_cpu_s(), os.getloadavg()[0]
    started = time.perf_counter()
    with ReadProbe(bench.stack.config) as probe:
        answer = run()
    seconds = time.perf_counter() - started
    cpu = {label: process_cpu_s(pid) - before[label] for label, pid in processes.items()}
    cpu["client"] = _client_cpu_s() - client_before
    wrong = {key: (answer.get(key), value) for key, value in expected.items()
             if answer.get(key) != value}
    held = registry_size(bench.stack.config)
    if wrong or held != (count if stored is None else stored):
        raise RuntimeError(f"{name}: counts {wrong} (got, expected); {held} devices stored")
    row = Row(name, seconds, count, answer, cpu, _peak_rss_mb(processes["api"]),
              (load_before, os.getloadavg()[0]), probe.latencies_ms)
    print(f"  {name}: {seconds:.1f} s, {row.per_s:,.0f} devices/s; CPU s "
          f"{', '.join(f'{label} {s:.1f}' for label, s in cpu.items())}; api peak RSS "
          f"{row.api_peak_rss_mb:.0f} MB; load {row.load[0]:.1f}/{row.load[1]:.1f}; a read beside "
          f"it {_reads(row)} ms", flush=True)
    return row


def _reads(row: Row) -> str:
    """A read's latency beside the row: median / p99 / max, in ms."""
    latencies = row.read_ms
    if not latencies:
        return "-"
    return (f"{statistics.median(latencies):.0f} / {_percentile(latencies, 0.99):.0f} / "
            f"{max(latencies):.0f}")


def table(rows: list[Row], baseline: Row) -> str:
    return format_table(
        ["row", "devices", "seconds", "devices/s", "x baseline", "api CPU s", "nx-27017 CPU s",
         "client CPU s", "api peak RSS MB", "a read beside: p50 / p99 / max ms",
         "load before/after"],
        [[row.name, f"{row.devices:,}", f"{row.seconds:.1f}", f"{row.per_s:,.0f}",
          f"{row.per_s / baseline.per_s:.2f}", f"{row.cpu_s['api']:.1f}",
          f"{row.cpu_s['nx-27017']:.1f}", f"{row.cpu_s['client']:.1f}",
          f"{row.api_peak_rss_mb:.0f}", _reads(row), f"{row.load[0]:.1f}/{row.load[1]:.1f}"]
         for row in rows])


def run(count: int, again: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder, \
            running_stack(senders=0, api_timeout_s=TIMEOUT_S) as bench:
        path, again_path = Path(folder) / "devices.ndjson", Path(folder) / "again.ndjson"
        write_file(path, count)
        write_file(again_path, again)
        config = bench.stack.config
        empty_registry(config)
        rows = [measure(bench, "import: herald devices import (NDJSON stream), all new", count,
                        lambda: cli_import(config, path),
                        {"inserted": count, "updated": 0, "unchanged": 0, "invalid": 0}),
                measure(bench, f"import again: the file's first {again:,} lines, all unchanged",
                        again, lambda: cli_import(config, again_path),
                        {"inserted": 0, "updated": 0, "unchanged": again, "invalid": 0},
                        stored=count)]
        empty_registry(config)
        rows.append(measure(bench, "baseline: POST /v1/devices/bulk, 10,000 a call, all new",
                            count, lambda: bulk_import(bench.api, count), {"inserted": count}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=50_000)
    parser.add_argument("--again", type=int, default=50_000,
                        help="lines of the file imported again (at most --devices)")
    parser.add_argument("--output", type=Path, default=results_path("device_import.json"))
    args = parser.parse_args()
    started = datetime.now(UTC)
    rows = run(args.devices, min(args.again, args.devices))
    print()
    print(table(rows, baseline=rows[-1]))
    record: dict[str, Any] = {
        "bench": "device_import", "started": started.isoformat(), "devices": args.devices,
        "again": min(args.again, args.devices),
        "source_version": source_version(), "machine": machine(["pymongo", "nx-27017"]),
        "rows": [{**row.__dict__, "per_s": row.per_s} for row in rows]}
    write_json(args.output, record)


if __name__ == "__main__":
    main()
