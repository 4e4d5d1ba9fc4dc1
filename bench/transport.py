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
import asyncio
import contextlib
import cProfile
import functools
import json
import multiprocessing
import os
import platform
import pstats
import resource
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import firebase_admin
import httpx
import uvloop
from firebase_admin import credentials, messaging
from google.oauth2 import credentials as oauth2

from fcm_emulator.client import EmulatorClient
from herald.adapters import redis as herald_redis
from herald.adapters.fcm import FcmClient, open_session
from herald.adapters.rate_limit import TokenBucket
from herald.domain.payload import MessageTemplate, build_payload
from herald.settings import Settings
from services.sender.delivery import BatchResult, BatchSender, Target

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "transport.json"
BASELINE = "firebase-admin"
PROJECT = "bench"
STATIC_ACCESS_TOKEN = "bench-access-token"
TOKEN_LENGTH = 163
"""Length of a real FCM registration token, so request bodies have production size."""
SDK_BATCH = 500
"""The most ``send_each_async`` accepts in one call."""
SENDER_BATCH = Settings.model_fields["sender_batch_size"].default
UNTHROTTLED_RATE_PER_S = 1_000_000.0
"""High enough that the Redis bucket grants every batch at once: it costs a round trip, no wait."""
DISTURBED_SHARE = 0.10
"""Other work on a pinned CPU above this share of the window makes a row's msg/s suspect..."""
SATURATED_SHARE = 0.95
"""...unless it is only the emulator's CPU and the row kept its own CPU this busy: then the row was
bound by its own work and a slower emulator did not hold it back."""
QUIET_SHARE = 0.05
QUIET_SAMPLE_S = 2.0
"""``--wait-quiet`` starts a run once both pinned CPUs were under 5% busy for 2 s."""
CHILD_SLACK_S = 120.0
"""Time a row's process may take beyond warm-up plus the timed window (start-up, a slow last batch)."""

TITLE = "Spring sale"
BODY = "Everything is 20% off until Sunday midnight."
DATA = {"campaignId": "6740d0b2a1f3c9e8d7b6a501", "landingUrl": "https://example.com/sale"}
TOKENS = [f"bench-{i:08d}-".ljust(TOKEN_LENGTH, "x") for i in range(SDK_BATCH)]


class BenchError(RuntimeError):
    """A row could not be measured honestly; no number is printed for it."""


# --- what each row runs (inside its own pinned child process) --------------------------------------


class Transport(Protocol):
    async def run(self, deadline: float) -> int:
        """Send until ``time.perf_counter()`` passes ``deadline``; return the messages accepted."""

    async def close(self) -> None: ...


class StaticCredential(credentials.Base):
    """A credential that needs no network: a fixed bearer token, as a service account would mint.

    The SDK still runs its whole auth flow per request (validity check, header applied).
    """

    def __init__(self) -> None:
        self._credential = oauth2.Credentials(token=STATIC_ACCESS_TOKEN)

    def get_credential(self) -> oauth2.Credentials:
        return self._credential


class StaticTokens:
    """Stands in for ``AccessTokens`` (which needs a service-account file): the same
    ``Authorization`` header and the same await per request, so both sides pay for auth."""

    async def header(self) -> str:
        return f"Bearer {STATIC_ACCESS_TOKEN}"


class FirebaseAdmin:
    """The official SDK used as documented: ``messaging.send_each_async`` on batches of 500."""

    def __init__(self, plan: Plan) -> None:
        # The SDK has no endpoint setting: the messaging service formats this class constant when
        # it is created (on first send). Patched here, in this row's own process only.
        messaging._MessagingService.FCM_URL = f"{plan.endpoint}/v1/projects/{{0}}/messages:send"
        self._app = firebase_admin.initialize_app(
            StaticCredential(), {"projectId": PROJECT}, name=f"bench-{uuid.uuid4().hex}")

    async def run(self, deadline: float) -> int:
        sent = 0
        while time.perf_counter() < deadline:
            sent += await self._send_batch()
        return sent

    async def _send_batch(self) -> int:
        """Building the ``Message`` objects is part of the SDK's path, so it is inside the timing."""
        batch = [messaging.Message(token=token, notification=messaging.Notification(TITLE, BODY),
                                   data=DATA) for token in TOKENS]
        response = await messaging.send_each_async(batch, app=self._app)
        if response.failure_count:
            first = next(r.exception for r in response.responses if not r.success)
            raise BenchError(f"send_each_async: {response.failure_count} failed, first: {first!r}")
        return response.success_count

    async def close(self) -> None:
        # firebase_admin.delete_app() would close the SDK's httpx client with asyncio.run(), which
        # cannot run inside this loop; close it directly instead.
        service = messaging._get_messaging_service(self._app)
        await service._async_client.aclose()


class RawHttpx:
    """httpx on its own (HTTP/1.1, one pooled connection per worker): the SDK's transport
    without the SDK, to tell the library's cost from the SDK's."""

    def __init__(self, plan: Plan) -> None:
        limits = httpx.Limits(max_connections=plan.concurrency,
                              max_keepalive_connections=plan.concurrency)
        self._client = httpx.AsyncClient(limits=limits, timeout=10.0)
        self._url = f"{plan.endpoint}/v1/projects/{PROJECT}/messages:send"
        self._headers = {"Content-Type": "application/json",
                         "Authorization": f"Bearer {STATIC_ACCESS_TOKEN}"}
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA))
        self._concurrency = plan.concurrency

    async def run(self, deadline: float) -> int:
        return await run_workers(self._send_one, self._concurrency, deadline)

    async def _send_one(self, token: str) -> bool:
        response = await self._client.post(self._url, content=self._template.body_for(token),
                                           headers=self._headers)
        return response.status_code == 200

    async def close(self) -> None:
        await self._client.aclose()


def herald_settings(plan: Plan) -> Settings:
    return Settings(sender_concurrency=plan.concurrency, fcm_endpoint=plan.endpoint,
                    fcm_project_id=PROJECT, redis_url=plan.redis_url)


class HeraldClient:
    """Herald's ``FcmClient`` alone: pre-encoded bodies over aiohttp's keep-alive pool."""

    def __init__(self, plan: Plan) -> None:
        settings = herald_settings(plan)
        self._session = open_session(settings)
        self._client = FcmClient(self._session, settings, StaticTokens())  # type: ignore[arg-type]
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA))
        self._concurrency = plan.concurrency

    async def run(self, deadline: float) -> int:
        return await run_workers(self._send_one, self._concurrency, deadline)

    async def _send_one(self, token: str) -> bool:
        return (await self._client.send(self._template.body_for(token))).ok

    async def close(self) -> None:
        await self._session.close()


class HeraldBatches:
    """What a sender pod runs per batch: ``BatchSender`` with the shared Redis token bucket,
    the per-request cancel check and metrics, ``streams`` batches in flight at once."""

    def __init__(self, plan: Plan, streams: int) -> None:
        settings = herald_settings(plan)
        self._session = open_session(settings)
        client = FcmClient(self._session, settings, StaticTokens())  # type: ignore[arg-type]
        self._redis = herald_redis.connect(settings)
        self._key = f"herald:bench-{uuid.uuid4().hex}:rate:fcm"
        bucket = TokenBucket(self._redis, self._key, UNTHROTTLED_RATE_PER_S)
        self._sender = BatchSender(client, settings.sender_concurrency, settings.fcm_max_retries,
                                   bucket)
        self._template = MessageTemplate(build_payload(TITLE, BODY, DATA))
        self._targets = [Target(position, token) for position, token in enumerate(TOKENS[:SENDER_BATCH])]
        self._cancelled = asyncio.Event()
        self._streams = streams

    async def run(self, deadline: float) -> int:
        counts = await asyncio.gather(*(self._stream(deadline) for _ in range(self._streams)))
        return sum(counts)

    async def _stream(self, deadline: float) -> int:
        sent = 0
        while time.perf_counter() < deadline:
            result = await self._sender.send(self._template, self._targets, self._cancelled, None)
            sent += accepted(result, len(self._targets))
        return sent

    async def close(self) -> None:
        await self._redis.delete(self._key)
        await self._redis.aclose()
        await self._session.close()


def accepted(result: BatchResult, expected: int) -> int:
    """Every recipient of the batch sent, or the row fails."""
    sent = sum(outcome.sent for outcome in result.outcomes)
    if result.stopped or sent != expected:
        raise BenchError(f"BatchSender sent {sent} of {expected} (stopped={result.stopped})")
    return sent


async def run_workers(send_one: Callable[[str], Awaitable[bool]], concurrency: int,
                      deadline: float) -> int:
    """``concurrency`` coroutines sending back to back: a constant number of requests in flight,
    with no batching of its own to add idle time between batches."""
    counts = await asyncio.gather(*(_worker(send_one, first, concurrency, deadline)
                                    for first in range(concurrency)))
    return sum(counts)


async def _worker(send_one: Callable[[str], Awaitable[bool]], first: int, step: int,
                  deadline: float) -> int:
    sent, index = 0, first
    while time.perf_counter() < deadline:
        if not await send_one(TOKENS[index % len(TOKENS)]):
            raise BenchError("the emulator refused a request")
        sent, index = sent + 1, index + step
    return sent


@dataclass(frozen=True)
class Row:
    name: str
    loop: str
    """``uvloop`` where Herald would run the code (its services do), else asyncio's default."""
    what: str
    open: Callable[[Plan], Transport]
    in_flight: str = "{c}"
    """Requests in flight at most; ``{c}`` is ``--concurrency``."""


ROWS = {row.name: row for row in (
    Row(BASELINE, "uvloop", "firebase_admin.messaging.send_each_async, 500 messages per call",
        FirebaseAdmin, "500/call"),
    Row("firebase-admin-asyncio", "asyncio", "the same on asyncio's default loop", FirebaseAdmin,
        "500/call"),
    Row("httpx", "uvloop", "raw httpx.AsyncClient, HTTP/1.1, Herald's pre-encoded bodies", RawHttpx),
    Row("herald-fcm-client", "uvloop", "herald.adapters.fcm.FcmClient (aiohttp)", HeraldClient),
    Row("herald-fcm-client-asyncio", "asyncio", "the same on asyncio's default loop", HeraldClient),
    Row("herald-batch-sender", "uvloop",
        f"services.sender.delivery.BatchSender + Redis TokenBucket, batches of {SENDER_BATCH} "
        "one at a time",
        functools.partial(HeraldBatches, streams=1), "<={c}"),
    Row("herald-batch-sender-x4", "uvloop",
        "the same with 4 batches at once, as a pod with HERALD_SENDER_PREFETCH=4 runs them",
        functools.partial(HeraldBatches, streams=Settings.model_fields["sender_prefetch"].default),
        "<={c}"),
)}


# --- measuring, inside the child --------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Everything a row's process needs (picklable: it crosses to a spawned process)."""

    row: str
    endpoint: str
    seconds: float
    warmup_s: float
    concurrency: int
    redis_url: str
    emulator_pid: int
    cpu: int | None
    emulator_cpu: int | None
    profile_to: str | None = None


@dataclass(frozen=True)
class Measurement:
    """One timed window of one row, as the row's process saw it (picklable, back to the parent)."""

    row: str
    loop: str
    in_flight: str
    messages: int
    seconds: float
    cpu_s: float
    emulator_cpu_s: float
    others_cpu_s: tuple[float, float] | None
    """CPU the two pinned CPUs spent on anything but the row and the emulator (other processes;
    kernel work not charged to either): a throughput is only trustworthy when this is small."""
    requests_sent: int
    """Warm-up included: what the emulator must have counted."""

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_s_per_1k(self) -> float:
        return 1000 * self.cpu_s / self.messages

    @property
    def others_share(self) -> tuple[float, float] | None:
        if self.others_cpu_s is None:
            return None
        client, emulator = self.others_cpu_s
        return round(client / self.seconds, 3), round(emulator / self.seconds, 3)

    @property
    def disturbed(self) -> bool:
        """Other work took a real share of the row's CPU, or of the emulator's CPU while the row
        was not bound by its own CPU (so it may have been waiting on a starved emulator): this
        run's msg/s understates the transport."""
        if self.others_cpu_s is None:
            return False
        client, emulator = (seconds / self.seconds for seconds in self.others_cpu_s)
        row_bound = self.cpu_s / self.seconds > SATURATED_SHARE
        return client > DISTURBED_SHARE or (emulator > DISTURBED_SHARE and not row_bound)

    def as_dict(self, baseline: Measurement | None) -> dict[str, Any]:
        rounded = {key: round(value, 6) if isinstance(value, float) else value
                   for key, value in asdict(self).items()}
        if self.others_cpu_s is not None:
            rounded["others_cpu_s"] = [round(seconds, 6) for seconds in self.others_cpu_s]
        return {**rounded, "messages_per_s": round(self.per_s, 1),
                "cpu_s_per_1k_messages": round(self.cpu_s_per_1k, 4),
                "client_cpu_share": round(self.cpu_s / self.seconds, 3),
                "emulator_cpu_share": round(self.emulator_cpu_s / self.seconds, 3),
                "others_cpu_share": self.others_share, "disturbed": self.disturbed,
                "ratio_to_baseline": round(self.per_s / baseline.per_s, 2) if baseline else None}


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float
    emulator_cpu: float
    busy: tuple[float, float] | None
    """Busy seconds of the row's CPU and of the emulator's CPU, whoever used them."""

    @classmethod
    def take(cls, plan: Plan) -> Sample:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        busy = None
        if plan.cpu is not None and plan.emulator_cpu is not None:
            busy = (cpu_busy_s(plan.cpu), cpu_busy_s(plan.emulator_cpu))
        return cls(time.perf_counter(), usage.ru_utime + usage.ru_stime,
                   process_cpu_s(plan.emulator_pid), busy)

    def others_since(self, before: Sample) -> tuple[float, float] | None:
        """Busy time of both CPUs that neither the row nor the emulator accounts for."""
        if self.busy is None or before.busy is None:
            return None
        return (self.busy[0] - before.busy[0] - (self.cpu - before.cpu),
                self.busy[1] - before.busy[1] - (self.emulator_cpu - before.emulator_cpu))


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of another process, from /proc (10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # stat fields 14, 15


def cpu_busy_s(cpu: int) -> float:
    """Seconds CPU ``cpu`` was not idle since boot, from /proc/stat (10 ms resolution)."""
    prefix = f"cpu{cpu} "
    line = next(line for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith(prefix))
    ticks = [int(field) for field in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)


async def measure(row: Row, plan: Plan) -> Measurement:
    """Warm up (connections, the SDK's lazy service, caches), then time a fixed window."""
    transport = row.open(plan)
    try:
        warm = await transport.run(time.perf_counter() + plan.warmup_s)
        before = Sample.take(plan)
        with profiled(plan.profile_to):
            sent = await transport.run(before.wall + plan.seconds)
        after = Sample.take(plan)
    finally:
        await transport.close()
    return Measurement(row.name, row.loop, row.in_flight.format(c=plan.concurrency), sent,
                       after.wall - before.wall, after.cpu - before.cpu,
                       after.emulator_cpu - before.emulator_cpu, after.others_since(before),
                       warm + sent)


def child_main(plan: Plan, conn: Connection) -> None:
    """A row's process: pin to its CPU, start the row's event loop, send back the measurement
    (or the error text, so the parent can say why a row has no number)."""
    if plan.cpu is not None:
        os.sched_setaffinity(0, {plan.cpu})
    row = ROWS[plan.row]
    loop_factory = uvloop.new_event_loop if row.loop == "uvloop" else None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            conn.send(runner.run(measure(row, plan)))
    except Exception as exc:
        conn.send(f"{plan.row}: {exc!r}")
        raise
    finally:
        conn.close()


# --- orchestrating, in the parent -------------------------------------------------------------------


@dataclass(frozen=True)
class Emulator:
    endpoint: str
    pid: int
    cpu: int | None
    client: EmulatorClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def choose_cpus() -> tuple[int | None, int | None]:
    """(rows' CPU, emulator's CPU): the first two this process may use; no pinning with one."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("warning: one CPU only; client and emulator share it, nothing is pinned",
              file=sys.stderr)
        return None, None
    return cpus[0], cpus[1]


@contextlib.contextmanager
def running_emulator(cpu: int | None) -> Iterator[Emulator]:
    """``python -m fcm_emulator`` on a free port, pinned to ``cpu``, stopped on the way out."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "fcm_emulator", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT)
    endpoint = f"http://127.0.0.1:{port}"
    client = EmulatorClient(endpoint)
    try:
        if cpu is not None:
            os.sched_setaffinity(process.pid, {cpu})
        wait_until_healthy(endpoint, process)
        yield Emulator(endpoint, process.pid, cpu, client)
    finally:
        client.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_healthy(endpoint: str, process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"the FCM emulator exited with status {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{endpoint}/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise BenchError(f"the FCM emulator did not answer on {endpoint} within {timeout_s:g} s")


def in_child(plan: Plan) -> Measurement:
    """Run one row in a fresh spawned process, so rows never share a loop, pool or import state."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=child_main, args=(plan, send), name=f"bench-{plan.row}")
    process.start()
    send.close()
    try:
        if not receive.poll(plan.warmup_s + plan.seconds + CHILD_SLACK_S):
            raise BenchError(f"{plan.row}: no result within the time allowed")
        result = receive.recv()
    except EOFError:
        raise BenchError(f"{plan.row}: the row's process died without a result") from None
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    if isinstance(result, str):
        raise BenchError(result)
    return result


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


def run_row(name: str, args: argparse.Namespace, emulator: Emulator, cpu: int | None,
            profile_to: str | None = None) -> Measurement:
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


# --- reporting ---------------------------------------------------------------------------------------


Runs = dict[str, list[Measurement]]
"""Every measurement of each row, in the order taken."""

COLUMNS = ("row", "loop", "in flight", "messages", "seconds", "msg/s", "msg/s range", "x baseline",
           "CPU-s/1k msg", "client CPU", "emulator CPU", "others", "clean runs")


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


def table_rows(runs: Runs) -> list[tuple[str, ...]]:
    baseline = baseline_of(runs)
    rows = []
    for row_runs in runs.values():
        m = median_run(row_runs)
        ordered = counted(row_runs)
        spread = f"{ordered[0].per_s:,.0f}-{ordered[-1].per_s:,.0f}"
        rows.append((m.row, m.loop, m.in_flight, f"{m.messages:,}", f"{m.seconds:.2f}",
                     f"{m.per_s:,.0f}", spread if len(row_runs) > 1 else "",
                     f"{m.per_s / baseline.per_s:.1f}" if baseline else "n/a",
                     f"{m.cpu_s_per_1k:.3f}", f"{m.cpu_s / m.seconds:.0%}",
                     f"{m.emulator_cpu_s / m.seconds:.0%}", others(m),
                     f"{sum(not r.disturbed for r in row_runs)}/{len(row_runs)}"))
    return rows


def others(measurement: Measurement) -> str:
    share = measurement.others_share
    if share is None:
        return "n/a"
    client, emulator = (max(0.0, value) for value in share)  # 10 ms ticks: can dip below zero
    return f"{client:.0%}/{emulator:.0%}"


def disturbed(runs: Runs) -> list[str]:
    """Rows without a single undisturbed run: their msg/s understates the transport."""
    return [name for name, row_runs in runs.items() if median_run(row_runs).disturbed]


def format_table(runs: Runs) -> str:
    """A Markdown table, readable in a terminal and pasteable into the README."""
    rows = [COLUMNS, *table_rows(runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(cell.ljust(w) if i < 3 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))) + " |"
             for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def baseline_of(runs: Runs) -> Measurement | None:
    return median_run(runs[BASELINE]) if BASELINE in runs else None


def source_version() -> str:
    """The commit measured (the code under test changes), ``+dirty`` if tracked files differ."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{commit}+dirty" if _git("status", "--porcelain", "--untracked-files=no") else commit


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("model name")), platform.processor())
    packages = ("firebase-admin", "httpx", "httpcore", "aiohttp", "uvloop", "orjson", "redis")
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": platform.python_version(),
            "packages": {name: metadata.version(name) for name in packages}}


def write_json(path: Path, runs: Runs, args: argparse.Namespace,
               cpus: tuple[int | None, int | None], source: str) -> None:
    baseline = baseline_of(runs)
    rows = [{**median_run(row_runs).as_dict(baseline), "what": ROWS[name].what,
             "runs": [run.as_dict(baseline) for run in row_runs]}
            for name, row_runs in runs.items()]
    report = {"bench": "transport", "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
              "source": source, "machine": machine(),
              "baseline": BASELINE if baseline else None,
              "settings": {"seconds": args.seconds, "warmup_s": args.warmup,
                           "concurrency": args.concurrency, "repeat": args.repeat,
                           "emulator_latency_ms": args.latency_ms, "wait_quiet_s": args.wait_quiet,
                           "client_cpu": cpus[0], "emulator_cpu": cpus[1]},
              "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def print_profile(path: Path, limit: int = 25) -> None:
    """Own time grouped by library first (the question is usually "whose code?"), then the
    functions. Time inside uvloop's C code is invisible to cProfile and shows in neither."""
    stats = pstats.Stats(str(path))
    by_owner = own_time_by_owner(stats)
    total = sum(by_owner.values())
    print(f"\nown time by owner ({total:.2f} s profiled)")
    for owner, seconds in sorted(by_owner.items(), key=lambda item: -item[1])[:limit]:
        print(f"  {seconds:7.3f} s {seconds / total:6.1%}  {owner}")
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)


def own_time_by_owner(stats: pstats.Stats) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (filename, _, _), (_, _, own_s, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        owner = owner_of(filename)
        totals[owner] = totals.get(owner, 0.0) + own_s
    return totals


def owner_of(filename: str) -> str:
    """A third-party package, a project module, a stdlib module, or a C built-in."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if filename.startswith(f"{ROOT}/"):
        return filename.removeprefix(f"{ROOT}/")
    if filename == "~":
        return "C built-ins called from Python (socket, dict, orjson...)"
    return f"stdlib {Path(filename).name}"


# --- command line ------------------------------------------------------------------------------------


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
    print(format_table(runs))
    source = warn(runs, source)
    write_json(args.output, runs, args, cpus, source)
    print(f"\nwritten to {args.output}", file=sys.stderr)
    return 0


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
