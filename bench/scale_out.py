"""Scale-out on one machine: ``python -m bench.scale_out [--devices 100000]``

2 api replicas, 2 dispatchers, 4 senders and 3 schedulers (separate processes, as ``make up``
starts them) against one RabbitMQ vhost, one nx-27017 database and one Redis namespace. While a
campaign to ``--devices`` devices is sending, another campaign is cancelled mid-flight, a
schedule fires, and one dispatcher (the one holding the big campaign) and one sender are killed
with SIGKILL. From the FCM emulator's own record it checks:

- every device of the big campaign received it, exactly once except at most one batch per killed
  sender; the campaign's counts equal what FCM accepted;
- the cancelled campaign's last FCM request started ≤ 250 ms after the cancel call returned, and
  its counts equal what FCM accepted;
- the schedule fired once (one run, one campaign, each of its devices once).

The same script then runs the same story with one replica of each service and no kill: the
throughput ratio compares like with like. The e2e test ``tests/e2e/test_scale_out.py`` runs
:func:`run_story` at a reduced size.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from bson import ObjectId
from pymongo import MongoClient

from bench.common import (
    format_table,
    machine,
    process_cpu_s,
    results_path,
    source_version,
    write_json,
)
from bench.stack import Campaign, create_campaign, import_devices
from devstack.isolation import private_stack
from devstack.processes import ManagedProcess, wait_until
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald.settings import Settings

BATCH_SIZE: int = Settings.model_fields["sender_batch_size"].default
CANCEL_STOP_LIMIT_MS = 250.0
LATENCY_MS = 20
"""The emulator's answer time: FCM is a network away, and a cancel must find work in flight."""
LIVENESS_ENV = {"HERALD_HEARTBEAT_INTERVAL_S": "0.5", "HERALD_SWEEP_INTERVAL_S": "0.25",
                "HERALD_LEASE_S": "3", "HERALD_GRACE_PERIOD_S": "10"}
"""A killed pod's work is taken over within seconds (the e2e tier's settings)."""
SCHEDULE_DEVICES = 500
MARKER = "marker-cancel-returned"
CANCELLED_RATE_PER_S = 1_000
"""The cancelled campaign's own cap: still sending, whatever the machine, when the cancel comes."""
POLL_S = 0.05


@dataclass(frozen=True)
class Shape:
    apis: int
    dispatchers: int
    senders: int
    schedulers: int
    kill: bool
    """kill -9 one dispatcher and one sender mid-way."""

    def start(self, stack: Stack) -> None:
        stack.start(senders=self.senders, schedulers=self.schedulers,
                    dispatchers=self.dispatchers, apis=self.apis)

    @property
    def label(self) -> str:
        return (f"{self.apis} api, {self.dispatchers} dispatchers, {self.senders} senders, "
                f"{self.schedulers} schedulers" + (", kill -9" if self.kill else ""))


SCALED = Shape(apis=2, dispatchers=2, senders=4, schedulers=3, kill=True)
SINGLE = Shape(apis=1, dispatchers=1, senders=1, schedulers=1, kill=False)


@dataclass
class Figures:
    """What one run measured; ``problems`` lists every broken promise (empty: all kept)."""

    shape: str
    devices: int
    throughput_per_s: float = 0.0
    missing: int = 0
    duplicates: int = 0
    allowed_duplicates: int = 0
    cancel_stop_ms: float = 0.0
    """Cancel call returned → the last FCM request of that campaign started (the emulator's
    stamps, against the marker sent when the call returned)."""
    cancel_stop_wall_ms: float = 0.0
    """The same against this process's clock when the call returned (includes the emulator's
    backlog on a busy machine)."""
    cancel_returned_at: float = 0.0
    cancel_started_after_return: int = 0
    """FCM requests of the cancelled campaign that started after the cancel call returned."""
    cancel_sent: int = 0
    schedule_runs: int = 0
    killed: list[str] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each kind of process used while the big campaign was sent (the killed ones
    until they were killed are left out), and the load average then."""
    problems: list[str] = field(default_factory=list)


def population(devices: int) -> list[dict[str, Any]]:
    """The big campaign's devices (android), the cancelled one's (ios, a fifth as many) and the
    schedule's (web): one platform each, so the emulator's record splits by token prefix."""
    def group(prefix: str, platform: str, count: int) -> list[dict[str, Any]]:
        return [{"token": f"{prefix}-{i:06d}-" + "x" * 120, "platform": platform}
                for i in range(count)]
    return [*group("big", "android", devices), *group("cxl", "ios", cancel_devices(devices)),
            *group("sch", "web", SCHEDULE_DEVICES)]


def cancel_devices(devices: int) -> int:
    return max(devices // 5, 8 * BATCH_SIZE)


class Story:
    """One run of the story on a started stack."""

    def __init__(self, stack: Stack, shape: Shape, devices: int) -> None:
        self.stack = stack
        self.shape = shape
        self.devices = devices
        headers = stack.config.api_headers()
        self.apis = [httpx.Client(base_url=url, timeout=60, headers=headers)
                     for url in stack.api_urls]
        self.emulator = EmulatorClient(stack.config.fcm_url)
        self._fcm_headers = stack.config.fcm_headers()
        self.figures = Figures(shape.label, devices)

    def close(self) -> None:
        for api in self.apis:
            api.close()
        self.emulator.close()

    @property
    def first_api(self) -> httpx.Client:
        return self.apis[0]

    @property
    def last_api(self) -> httpx.Client:
        return self.apis[-1]

    def run(self) -> Figures:
        self._prepare()
        schedule_id = self._create_schedule()
        cpu_before = self._cpu()
        # the campaign to cancel goes first (its chunks are not queued behind the big one's),
        # capped so that it is still sending when the cancel comes
        doomed = create_campaign(self.last_api, {
            "title": "Broken", "body": "link", "audience": {"platforms": ["ios"]},
            "rate_per_s": CANCELLED_RATE_PER_S})
        big = create_campaign(self.first_api, {"title": "Big", "body": "news",
                                               "audience": {"platforms": ["android"]}})
        cancelled = self._cancel_mid_flight(doomed)
        self._plan_run(schedule_id)
        self._wait(big, lambda c: c["counts"]["sent"] >= 2 * self.devices // 5, "40% sent")
        if self.shape.kill:
            self._kill(big)
        final = self._wait(big, lambda c: c["status"] in TERMINAL, "finished",
                           timeout_s=60 + self.devices / 200)
        self._account_cpu(cpu_before)
        self._check(final, cancelled, schedule_id)
        return self.figures

    def _cpu(self) -> dict[str, float]:
        return {name: process_cpu_s(p.pid) for name, p in self.stack.processes.items()
                if p.alive()}

    def _account_cpu(self, before: dict[str, float]) -> None:
        used: dict[str, float] = {}
        for name, cpu_s in self._cpu().items():
            if name in before:
                kind = name if name == "fcm-emulator" else name.split("-")[0]
                used[kind] = used.get(kind, 0.0) + cpu_s - before[name]
        self.figures.cpu_s = {name: round(value, 1) for name, value in sorted(used.items())}
        self.figures.cpu_s["load_average_1m"] = round(os.getloadavg()[0], 1)

    def _prepare(self) -> None:
        devices = population(self.devices)
        step = len(devices) // len(self.apis) + 1
        for index, api in enumerate(self.apis):  # every api replica takes a share
            import_devices(api, devices[index * step:(index + 1) * step])
        self.emulator.reset()
        self.emulator.configure(latency_ms=LATENCY_MS)

    def _create_schedule(self) -> str:
        response = self.last_api.post("/v1/schedules", json={
            "name": "scale-out", "cron": "0 0 1 1 *", "timezone": "UTC",
            "template": {"title": "Scheduled", "body": "run",
                         "audience": {"platforms": ["web"]}}})
        response.raise_for_status()
        return str(response.json()["id"])

    def _plan_run(self, schedule_id: str) -> None:
        """Cron has minute granularity: the next run is planned 1 s ahead in the store, as if
        the schedule had been made a while ago."""
        due = datetime.now(UTC) + timedelta(seconds=1)
        client: MongoClient[dict[str, Any]]
        with MongoClient(self.stack.config.mongodb_url, tz_aware=True) as client:
            client[self.stack.config.database]["schedules"].update_one(
                {"_id": ObjectId(schedule_id)}, {"$set": {"next_run_at": due}})

    def _cancel_mid_flight(self, campaign_id: str) -> Campaign:
        self._wait(campaign_id, lambda c: c["counts"]["sent"] >= BATCH_SIZE, "sending")
        self.last_api.post(f"/v1/campaigns/{campaign_id}/cancel").raise_for_status()
        self.figures.cancel_returned_at = time.time()
        self._mark_cancel_returned()
        return self._wait(campaign_id, lambda c: c["status"] == "cancelled", "cancelled")

    def _mark_cancel_returned(self) -> None:
        """One FCM request of our own the moment the cancel call returned. On a busy machine the
        emulator stamps requests late (they wait in its socket backlog): the marker waits in
        the same backlog, so a sender's request stamped after it was sent after the call
        returned, and one stamped before it was not."""
        httpx.post(f"{self.stack.config.fcm_url}/v1/projects/herald-local/messages:send",
                   json={"message": {"token": MARKER, "notification": {"title": "m"}}},
                   headers=self._fcm_headers, timeout=10).raise_for_status()

    def _kill(self, big: str) -> None:
        victims = [self._dispatcher_of(big), self.stack.processes["sender-1"]]
        for process in victims:
            process.kill()
            self.figures.killed.append(process.name)

    def _dispatcher_of(self, campaign_id: str) -> ManagedProcess:
        """The dispatcher process holding ``campaign_id``'s lease (by its pod's PID)."""
        client: MongoClient[dict[str, Any]]
        with MongoClient(self.stack.config.mongodb_url) as client:
            campaign: dict[str, Any] = client[self.stack.config.database]["campaigns"].find_one(
                {"_id": ObjectId(campaign_id)}) or {}
        owner = campaign.get("dispatch", {}).get("owner")
        pods = self.first_api.get("/v1/pods").json()["pods"]
        pids = {pod["pid"] for pod in pods if pod["id"] == owner}
        owners = [p for p in self.stack.processes.values()
                  if p.name.startswith("dispatcher") and p.pid in pids]
        return owners[0] if owners else self.stack.processes["dispatcher"]

    def _wait(self, campaign_id: str, reached: Callable[[Campaign], bool], what: str,
              timeout_s: float = 120.0) -> Campaign:
        latest: list[Campaign] = []

        def check() -> bool:
            response = self.first_api.get(f"/v1/campaigns/{campaign_id}")
            if response.status_code != 200:  # a busy api or a broker restart: ask again
                return False
            latest[:] = [response.json()]
            return reached(latest[0])
        wait_until(check, timeout_s, f"campaign {campaign_id} {what}", interval_s=POLL_S)
        return latest[0]

    def _check(self, big: Campaign, cancelled: Campaign, schedule_id: str) -> None:
        runs = self._schedule_runs(schedule_id)
        received = self.emulator.received()
        by_group = {prefix: [r for r in received if r.token.startswith(prefix)]
                    for prefix in ("big-", "cxl-", "sch-")}
        self._check_big(big, by_group["big-"], received)
        marker = next(r for r in received if r.token == MARKER)
        self._check_cancel(cancelled, by_group["cxl-"], marker)
        self._check_schedule(runs, by_group["sch-"])

    def _check_big(self, big: Campaign, requests: list[Received],
                   everything: list[Received]) -> None:
        figures = self.figures
        accepted = Counter(r.token for r in requests if r.accepted)
        figures.missing = self.devices - len(accepted)
        figures.duplicates = sum(n - 1 for n in Counter(
            r.token for r in everything if r.accepted).values())
        figures.allowed_duplicates = BATCH_SIZE * sum(
            name.startswith("sender") for name in figures.killed)
        times = [r.received_at for r in requests]
        figures.throughput_per_s = len(requests) / max(max(times) - min(times), 1e-3)
        expect(figures, big["status"] == "completed", f"big campaign {big['status']}")
        expect(figures, figures.missing == 0, f"{figures.missing} devices never got it")
        expect(figures, figures.duplicates <= figures.allowed_duplicates,
               f"{figures.duplicates} duplicates (allowed {figures.allowed_duplicates})")
        counts = big["counts"]
        expect(figures, counts["sent"] == len(accepted) == counts["targeted"],
               f"counts {counts} against {len(accepted)} accepted")

    def _check_cancel(self, cancelled: Campaign, requests: list[Received],
                      marker: Received) -> None:
        figures = self.figures
        last_started = max(r.received_at for r in requests)
        figures.cancel_stop_ms = 1000 * (last_started - marker.received_at)
        figures.cancel_stop_wall_ms = 1000 * (last_started - figures.cancel_returned_at)
        figures.cancel_sent = cancelled["counts"]["sent"]
        figures.cancel_started_after_return = sum(
            r.received_at > marker.received_at for r in requests)
        accepted = {r.token for r in requests if r.accepted}
        in_flight = BATCH_SIZE * self.shape.senders
        expect(figures, figures.cancel_stop_ms <= CANCEL_STOP_LIMIT_MS,
               f"cancel stopped {figures.cancel_stop_ms:.0f} ms after the call returned")
        expect(figures, figures.cancel_started_after_return <= in_flight,
               f"{figures.cancel_started_after_return} requests after the cancel returned")
        expect(figures, figures.cancel_sent == len(accepted) < cancel_devices(self.devices),
               f"cancelled counts {cancelled['counts']} against {len(accepted)} accepted")

    def _schedule_runs(self, schedule_id: str) -> list[dict[str, Any]]:
        def fired() -> list[dict[str, Any]] | None:
            schedule = self.first_api.get(f"/v1/schedules/{schedule_id}").json()
            return list(schedule["runs"]) or None
        wait_until(lambda: fired() is not None, 60, "the schedule to fire", interval_s=POLL_S)
        runs = fired() or []
        for run in runs:
            if run["campaign_id"]:
                self._wait(run["campaign_id"], lambda c: c["status"] in TERMINAL, "finished")
        return runs

    def _check_schedule(self, runs: list[dict[str, Any]], requests: list[Received]) -> None:
        figures = self.figures
        figures.schedule_runs = len(runs)
        per_token = Counter(r.token for r in requests if r.accepted)
        expect(figures, [r["outcome"] for r in runs] == ["fired"], f"schedule runs {runs}")
        expect(figures, len(per_token) == SCHEDULE_DEVICES,
               f"the schedule reached {len(per_token)} of {SCHEDULE_DEVICES} devices")


TERMINAL = {"completed", "failed", "cancelled", "missed"}


def expect(figures: Figures, holds: bool, problem: str) -> None:
    if not holds:
        figures.problems.append(problem)


def run_story(stack: Stack, shape: Shape, devices: int) -> Figures:
    """Start ``shape`` on ``stack`` (not yet started), run the story, return its figures."""
    shape.start(stack)
    story = Story(stack, shape, devices)
    try:
        return story.run()
    finally:
        story.close()


def run_private(shape: Shape, devices: int) -> Figures:
    """The story on a stack of its own (nx-27017, vhost, Redis namespace), removed afterwards."""
    with tempfile.TemporaryDirectory() as run_dir, \
            private_stack(Path(run_dir), extra_env=LIVENESS_ENV) as stack:
        return run_story(stack, shape, devices)


def table(runs: list[Figures]) -> str:
    base = runs[-1].throughput_per_s
    return format_table(
        ["shape", "devices", "sent/s", "vs 1-of-each", "missing", "duplicates (allowed)",
         "cancel stop (wall)", "schedule runs", "problems"],
        [(f.shape, f"{f.devices:,}", f"{f.throughput_per_s:,.0f}",
          f"{f.throughput_per_s / base:.2f}", str(f.missing),
          f"{f.duplicates} ({f.allowed_duplicates})",
          f"{f.cancel_stop_ms:.0f} ms ({f.cancel_stop_wall_ms:.0f} ms)",
          str(f.schedule_runs), "; ".join(f.problems) or "none") for f in runs])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=results_path("scale_out.json"))
    args = parser.parse_args()
    runs = [run_private(shape, args.devices) for shape in (SCALED, SINGLE)]
    print(table(runs))
    write_json(args.out, {"source": source_version(), "machine": machine(["pymongo"]),
                          "at": datetime.now(UTC).isoformat(),
                          "runs": [asdict(f) for f in runs]})
    return 1 if any(f.problems for f in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
