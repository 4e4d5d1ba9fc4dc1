"""``python -m bench.http2``: Herald's FCM client on HTTP/1.1 against HTTP/2 clients, by CPU per
request, against an FCM stand-in a real round trip away (issue 20, point 7).

Google's endpoint negotiates HTTP/2 (ALPN ``h2``), about 100 concurrent streams per connection
by users' reports; Herald holds one HTTP/1.1 connection per request in flight (256 per sender).
The decision rule: adopt an HTTP/2 client if its CPU per request is within 10% of today's.

* The stand-in (``bench.http2.standin``: hypercorn, TLS, ALPN ``h2`` and ``http/1.1`` on one
  port, 100 streams per connection) answers like FCM after ``--latency-ms``; today's client
  (aiohttp over TLS) and the HTTP/2 clients meet the same server code. A plaintext row against
  the project's emulator is the link to ``bench.transport``'s numbers.
* Every row runs in its own process pinned to one CPU, the servers on the other; it warms up
  (connections, TLS handshakes), then sends for ``--seconds``. CPU is the row process's own
  (``time.process_time``) over that window; connections are the server's ESTABLISHED sockets
  at its end; the server's own count must equal what the row sent, all 200, all in the row's
  HTTP version, or the bench stops without a number.
* The rows alternate ``--runs`` times per latency; the table gives medians, and the ratio of
  each run's CPU per request to the ``aiohttp-tls`` run next to it.

The table goes to stdout and the full record to ``bench/results/http2.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.common import results_path, source_version
from bench.http2.measure import in_child
from bench.http2.report import Run, tables, write_record
from bench.http2.rows import NIQUESTS_MISSING, ROWS, Plan
from bench.http2.server import Server, running_emulator_server, running_standin
from bench.transport.emulator import choose_cpus
from bench.transport.records import BenchError
from herald.settings import Settings

DEFAULT_OUTPUT = results_path("http2.json")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.http2", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[50.0],
                        help="the stand-in's answer delay(s); each gets its own table")
    parser.add_argument("--runs", type=int, default=3, help="alternating runs per latency")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed window per row")
    parser.add_argument("--warmup", type=float, default=1.5, help="untimed sending before it")
    parser.add_argument("--concurrency", type=int,
                        default=Settings.model_fields["sender_concurrency"].default,
                        help="requests in flight at most (HERALD_SENDER_CONCURRENCY)")
    parser.add_argument("--max-streams", type=int, default=100,
                        help="the stand-in's HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), metavar="ROW",
                        help=f"rows to run, of: {', '.join(ROWS)} (default: all that are "
                             "installed)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON record")
    return parser.parse_args(argv)


def installed(name: str) -> bool:
    needs = ROWS[name].needs
    return needs is None or importlib.util.find_spec(needs) is not None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rows is None:
        args.rows = [name for name in ROWS if installed(name)]
        if len(args.rows) < len(ROWS):
            print(f"note: {NIQUESTS_MISSING}", file=sys.stderr)
    cpus = choose_cpus()
    source = source_version()
    try:
        with contextlib.ExitStack() as stack:
            standin = stack.enter_context(running_standin(cpus[1], args.max_streams))
            emulator = (stack.enter_context(running_emulator_server(cpus[1]))
                        if "aiohttp-plain" in args.rows else None)
            stack.enter_context(trusting(standin.cafile))
            runs = measure_all(args, cpus, standin, emulator)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    print(tables(runs, args.rows))
    write_record(args.output, runs, args, cpus, source)
    print(f"\nwritten to {args.output}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def trusting(cafile: str | None) -> Iterator[None]:
    """Row processes started meanwhile trust the stand-in's certificate by default
    (``SSL_CERT_FILE``), so Herald's own ``open_session`` verifies it unchanged."""
    before = os.environ.get("SSL_CERT_FILE")
    if cafile:
        os.environ["SSL_CERT_FILE"] = cafile
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before


def measure_all(args: argparse.Namespace, cpus: tuple[int | None, int | None], standin: Server,
                emulator: Server | None) -> list[Run]:
    print(f"{len(args.rows)} rows x {args.runs} runs x latencies {args.latency_ms} ms, "
          f"{args.seconds:g} s each, rows on CPU {cpus[0]}, servers on CPU {cpus[1]}",
          file=sys.stderr)
    runs: list[Run] = []
    for latency_ms in args.latency_ms:
        for index in range(args.runs):
            load = os.getloadavg()[0]
            for name in args.rows:
                server = emulator if ROWS[name].tls is False and emulator else standin
                runs.append(measure_row(name, args, cpus, server, latency_ms, index, load))
    return runs


def measure_row(name: str, args: argparse.Namespace, cpus: tuple[int | None, int | None],
                server: Server, latency_ms: float, index: int, load: float) -> Run:
    """Row ``name`` once, in its own process; the server must agree with what it sent."""
    server.reset(latency_ms)
    plan = Plan(name, server.endpoint, server.cafile, args.seconds, args.warmup,
                args.concurrency, args.max_streams, server.port, server.pid, cpus[0], cpus[1])
    measurement = in_child(plan)
    stats = server.verify(ROWS[name], measurement.requests_sent)
    print(f"  {latency_ms:g} ms run {index + 1} {name:<18} {measurement.per_s:>7,.0f} msg/s "
          f"{measurement.cpu_ms_per_request:.3f} CPU-ms/req {measurement.connections:>3} conns "
          f"(load {load:.1f})", file=sys.stderr)
    return Run(latency_ms, index, load, measurement, stats)


if __name__ == "__main__":
    sys.exit(main())
