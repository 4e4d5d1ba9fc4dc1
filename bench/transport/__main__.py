"""``python -m bench.transport``: firebase-admin's ``send_each_async`` against Herald's FCM path.

Why this exists: the transport decides whether one sender pod can fill FCM's quota, and Herald's
choice of aiohttp over the official SDK (``herald/adapters/fcm.py``) rests on a throughput claim.
This bench measures that claim again, every row in the same run, against the project's FCM
emulator, so the ratios compare like with like:

* every row runs in its own child process pinned to one CPU while the emulator is pinned to
  another, so "messages/s on one core" is literal;
* each row warms up, then sends for a fixed time; its CPU time is the child's own (getrusage) and
  the emulator's CPU over the same window is reported too, to show which side was the limit;
* the emulator is reset before each row and its ``/_emulator/stats`` must show exactly the
  requests the row sent, all accepted, or the bench stops instead of printing a number;
* CPU that other processes took from the two pinned CPUs is measured as well (a shared machine):
  runs it disturbed are flagged and left out of the reported median when clean runs exist.

The table goes to stdout and the full record to ``bench/results/transport.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import results_path, source_version
from bench.transport.emulator import Emulator, choose_cpus, running_emulator
from bench.transport.profiling import print_profile
from bench.transport.records import BenchError
from bench.transport.report import table, warn, write_record
from bench.transport.rows import ROWS
from bench.transport.runner import measure_all, run_row
from herald.settings import Settings

DEFAULT_OUTPUT = results_path("transport.json")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.transport", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="timed window per row")
    parser.add_argument("--warmup", type=float, default=1.5, help="untimed sending before it")
    parser.add_argument("--concurrency", type=int,
                        default=Settings.model_fields["sender_concurrency"].default,
                        help="requests in flight for Herald and httpx rows (the SDK sends 500)")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), metavar="ROW",
                        help=f"rows to run, of: {', '.join(ROWS)}")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="make the emulator answer this late, to see what FCM's round trip "
                             "does to each transport (0: measure CPU cost alone)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure every row this many times, round-robin; report the median")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="on a shared machine, wait up to this long before each run for "
                             "other work to leave the pinned CPUs idle")
    parser.add_argument("--redis-url", help="Redis for the BatchSender rows' token bucket",
                        default=os.environ.get("HERALD_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON record")
    parser.add_argument("--profile", choices=list(ROWS), metavar="ROW",
                        help="run only ROW under cProfile and print where its time goes "
                             "(profiling slows it: the numbers are not recorded)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cpus = choose_cpus()
    source = source_version()
    try:
        with running_emulator(cpus[1]) as emulator:
            if args.profile:
                return profile(args, emulator, cpus[0])
            runs = measure_all(args, emulator, cpus[0])
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    print(table(runs))
    source = warn(runs, source)
    write_record(args.output, runs, args, cpus, source)
    print(f"\nwritten to {args.output}", file=sys.stderr)
    return 0


def profile(args: argparse.Namespace, emulator: Emulator, cpu: int | None) -> int:
    path = args.output.with_name(f"transport-{args.profile}.prof")
    path.parent.mkdir(parents=True, exist_ok=True)
    measurement = run_row(args.profile, args, emulator, cpu, profile_to=str(path))
    print(f"{args.profile} under cProfile: {measurement.per_s:,.0f} msg/s (profiler overhead "
          f"included; not a measurement). Profile: {path}")
    print_profile(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
