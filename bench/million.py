"""Issue 33's promises at a million devices: ``python -m bench.million --devices 1000000``

A whole local stack (nx-27017, FCM emulator 20 ms away, api, dispatcher, two senders, as
separate processes). Devices go straight into the database (not through the api: the import is
measured by ``bench.device_import``), first ``--reference`` of them, then up to ``--devices``;
at each size, on campaigns to every device:

- **first request**: the create call → the campaign's first FCM request (target ≤ 5 s);
- **cancel while paging**: the cancel call's answer (≤ 1 s), and the cancel requested →
  ``cancelled`` with exact final counts (median ≤ 1 s, p99 ≤ 3 s), ``--cancels`` times;
- **pause while paging**: the pause requested → settled (≤ 3 s); the resume's answer (≤ 1 s);
  the resume → sending again; then a cancel of the resumed campaign, confirmed;
- **estimate** of all devices (≤ 1 s);
- **GET /v1/campaigns/{id} during each of these**, every 0.1 s from another client: p99 and max
  (no call blocked more than 1 s by another);
- **exactness** of one cancelled campaign: its counts against its audit (sent and unsent lines)
  and, for sent, the FCM emulator's own record.

Every figure at ``--devices`` is printed beside the same at ``--reference`` (the ratio says what
the size costs), with the load average. About 10 minutes at 1,000,000 devices on the 2-vCPU dev
VM, most of it inserting them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pymongo import MongoClient
from pymongo.collection import Collection

from bench.common import format_table, results_path, source_version, write_json
from bench.stack import BenchStack, Campaign, running_stack, wait_for_campaign
from herald import names

LATENCY_MS = 20
INSERT_BATCH = 10_000
POLL_S = 0.05
PROBE_EVERY_S = 0.1
TIMEOUT_S = 300.0
CONTENT = {"title": "t", "body": "b"}


def _device(i: int, now: datetime) -> dict[str, Any]:
    """A device as the registry stores it (``DeviceStore``), opted in to marketing."""
    return {"token": f"million-{i:07d}-" + "x" * 132, "user_id": f"u{i}", "platform": "android",
            "push_enabled": True, "marketing_enabled": True, "topics": [], "locale": None,
            "timezone": None, "attributes": {}, "invalid": False, "created_at": now,
            "updated_at": now}


def insert_devices(mongodb_url: str, first: int, last: int) -> float:
    """Devices ``first``..``last - 1`` straight into the devices collection; seconds taken."""
    started = time.perf_counter()
    client: MongoClient[dict[str, Any]]
    with MongoClient(mongodb_url, tz_aware=True) as client:
        devices: Collection[dict[str, Any]] = client.get_default_database()[names.DEVICES]
        now = datetime.now(UTC)
        for start in range(first, last, INSERT_BATCH):
            devices.insert_many([_device(i, now) for i in range(start, min(last, start +
                                                                            INSERT_BATCH))],
                                ordered=False)
    return time.perf_counter() - started


@dataclass
class Probe:
    """``GET /v1/campaigns/{id}`` every ``PROBE_EVERY_S`` from a client of its own, timed."""

    stack: BenchStack
    samples: list[tuple[float, float, int]] = field(default_factory=list)
    """(started, seconds, status) of each call."""
    campaign_id: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        config = self.stack.stack.config
        thread = threading.Thread(target=self._run, args=(config.api_url,
                                                          config.api_headers()), daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def _run(self, url: str, headers: dict[str, str]) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            while not self._stop.is_set():
                campaign_id = self.campaign_id
                if campaign_id is not None:
                    started = time.time()
                    status = client.get(f"/v1/campaigns/{campaign_id}").status_code
                    self.samples.append((started, time.time() - started, status))
                time.sleep(PROBE_EVERY_S)

    def during(self, since: float, until: float) -> list[float]:
        return [seconds for started, seconds, _ in self.samples if since <= started <= until]


def _instant(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else 0.0


class Size:
    """The measurements at one audience size."""

    def __init__(self, stack: BenchStack, probe: Probe, devices: int) -> None:
        self.api = stack.api
        self.emulator = stack.emulator
        self.probe = probe
        self.devices = devices
        self.figures: dict[str, list[float]] = {}
        self.get_during: dict[str, list[float]] = {}
        self.checks: list[str] = []

    def note(self, name: str, value: float) -> None:
        self.figures.setdefault(name, []).append(value)

    def phase(self, name: str, since: float) -> None:
        self.get_during.setdefault(name, []).extend(self.probe.during(since, time.time()))

    def wait(self, campaign_id: str, reached: Callable[[Campaign], bool], what: str) -> Campaign:
        return wait_for_campaign(self.api, campaign_id, reached, f"{campaign_id} {what}",
                                 TIMEOUT_S, POLL_S)

    def started(self) -> str:
        """Create a campaign to everyone; note when its first FCM request came."""
        created = time.time()
        response = self.api.post("/v1/campaigns", json=CONTENT)
        response.raise_for_status()
        campaign_id = str(response.json()["id"])
        self.probe.campaign_id = campaign_id
        first = self.wait(campaign_id, lambda c: c.get("first_request_at") is not None,
                          "first request")
        self.note("first request after create (s)", _instant(first["first_request_at"]) - created)
        self.phase("create", created)
        return campaign_id

    def sending_and_paging(self, campaign_id: str) -> Campaign:
        return self.wait(campaign_id, lambda c: c["counts"]["sent"] > 0
                         and c["counts"]["targeted"] < self.devices, "sending, still paging")

    def cancelled(self, campaign_id: str, label: str) -> Campaign:
        called = time.time()
        self.api.post(f"/v1/campaigns/{campaign_id}/cancel").raise_for_status()
        self.note(f"{label}: cancel answered (s)", time.time() - called)
        campaign = self.wait(campaign_id, lambda c: c["status"] == "cancelled", "cancelled")
        cancel = campaign["cancel"]
        self.note(f"{label}: cancel confirmed (s)",
                  _instant(cancel["acknowledged_at"]) - _instant(cancel["requested_at"]))
        self.phase(label, called)
        counts = campaign["counts"]
        if counts["targeted"] != self.devices or (
                counts["sent"] + counts["failed"] + counts["unsent"] + counts["suppressed"]
                != counts["targeted"]):
            raise RuntimeError(f"cancelled counts wrong for {self.devices} devices: {counts}")
        return campaign

    def cancel_while_paging(self) -> Campaign:
        campaign_id = self.started()
        self.sending_and_paging(campaign_id)
        return self.cancelled(campaign_id, "cancel while paging")

    def pause_and_resume(self) -> None:
        campaign_id = self.started()
        self.sending_and_paging(campaign_id)
        called = time.time()
        self.api.post(f"/v1/campaigns/{campaign_id}/pause").raise_for_status()
        self.note("pause answered (s)", time.time() - called)
        paused = self.wait(campaign_id, lambda c: (c.get("pause") or {}).get("settled_at")
                           is not None, "pause settled")
        self.note("pause settled (s)", _instant(paused["pause"]["settled_at"])
                  - _instant(paused["pause"]["requested_at"]))
        self.phase("pause", called)
        sent = paused["counts"]["sent"]
        called = time.time()
        self.api.post(f"/v1/campaigns/{campaign_id}/resume").raise_for_status()
        self.note("resume answered (s)", time.time() - called)
        self.wait(campaign_id, lambda c: c["counts"]["sent"] > sent, "sending again")
        self.note("resume → sending again (s)", time.time() - called)
        self.phase("resume", called)
        self.cancelled(campaign_id, "cancel after resume")

    def estimate(self) -> None:
        called = time.time()
        response = self.api.post("/v1/audiences/estimate", json={"audience": {}})
        response.raise_for_status()
        self.note("estimate of all devices (s)", time.time() - called)
        self.phase("estimate", called)
        if response.json()["devices"] != self.devices:
            raise RuntimeError(f"estimate {response.json()['devices']} of {self.devices}")

    def check_exact(self, campaign: Campaign) -> None:
        """Counts = audit = FCM's record, for one cancelled campaign."""
        campaign_id, counts = campaign["id"], campaign["counts"]
        listed = {outcome: self._lines(campaign_id, outcome) for outcome in ("sent", "unsent")}
        received = {r.token for r in self.emulator.received() if r.error is None}
        sent_tokens = set(listed["sent"])
        self.checks.append(
            f"{self.devices:,} devices, campaign {campaign_id}: counts sent {counts['sent']:,} / "
            f"unsent {counts['unsent']:,}; audit sent {len(listed['sent']):,} / unsent "
            f"{len(listed['unsent']):,}; audit's sent all accepted by FCM "
            f"{sent_tokens <= received}")
        if (len(listed["sent"]), len(listed["unsent"])) != (counts["sent"], counts["unsent"]):
            raise RuntimeError(self.checks[-1])

    def _lines(self, campaign_id: str, outcome: str) -> list[str]:
        tokens: list[str] = []
        with self.api.stream("GET", f"/v1/campaigns/{campaign_id}/recipients",
                             params={"outcome": outcome}) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if line:
                    tokens.append(line.split('"token":"', 1)[1].split('"', 1)[0])
        return tokens


def measure(stack: BenchStack, probe: Probe, devices: int, cancels: int) -> Size:
    size = Size(stack, probe, devices)
    load = os.getloadavg()[0]
    size.estimate()
    for run in range(cancels):
        stack.emulator.reset()
        cancelled = size.cancel_while_paging()
        if run == 0:
            size.check_exact(cancelled)
    size.pause_and_resume()
    size.estimate()
    size.note("load average (1 min), before", load)
    size.note("load average (1 min), after", os.getloadavg()[0])
    return size


def report(sizes: list[Size]) -> str:
    reference, largest = sizes[0], sizes[-1]
    rows = []
    for name, values in largest.figures.items():
        base = reference.figures.get(name, [0.0])
        rows.append([name, f"{statistics.median(base):.2f}", f"{statistics.median(values):.2f}",
                     f"{max(values):.2f}", f"{len(values)}",
                     f"{statistics.median(values) / max(statistics.median(base), 1e-3):.1f}"])
    for name, values in largest.get_during.items():
        base = reference.get_during.get(name, [])
        rows.append([f"GET p99 during {name} (s)", f"{_percentile(base, 0.99):.3f}",
                     f"{_percentile(values, 0.99):.3f}", f"{max(values, default=0):.3f}",
                     f"{len(values)}",
                     f"{_percentile(values, 0.99) / max(_percentile(base, 0.99), 1e-3):.1f}"])
    return format_table(["figure", f"median at {reference.devices:,}",
                         f"median at {largest.devices:,}", f"max at {largest.devices:,}",
                         "samples", "x reference"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=200_000)
    parser.add_argument("--reference", type=int, default=100_000)
    parser.add_argument("--cancels", type=int, default=5, help="cancels while paging per size")
    parser.add_argument("--output", type=Path, default=results_path("million.json"))
    args = parser.parse_args()
    sizes: list[Size] = []
    inserted: dict[int, float] = {}
    with running_stack(senders=2, api_timeout_s=120) as stack:
        stack.emulator.configure(latency_ms=LATENCY_MS)
        probe = Probe(stack)
        with probe.running():
            have = 0
            for devices in (args.reference, args.devices):
                inserted[devices] = insert_devices(stack.stack.config.mongodb_url, have, devices)
                have = devices
                sizes.append(measure(stack, probe, devices, args.cancels))
    print(f"commit {source_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; devices inserted "
          + ", ".join(f"{n:,} in {s:.0f} s" for n, s in inserted.items()))
    print(report(sizes))
    for size in sizes:
        print(*size.checks, sep="\n")
    errors = sum(status >= 400 for _, _, status in probe.samples)
    print(f"GET probes: {len(probe.samples)}, errors {errors}")
    write_json(args.output, {"bench": "million", "commit": source_version(),
                             "sizes": [{"devices": s.devices, "figures": s.figures,
                                        "get_during": s.get_during, "checks": s.checks}
                                       for s in sizes], "inserted_s": inserted})


if __name__ == "__main__":
    main()
