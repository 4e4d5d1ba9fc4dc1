"""Many campaigns at once (issue 29): ``python -m bench.lanes``

A private stack (nx-27017, the FCM emulator ``--latency-ms`` away, api, dispatcher and two
senders, separate processes as ``make up`` starts them) runs, one phase after another, on one
population of devices (each in several topics, so every phase's campaigns have audiences of
their own and the emulator's record tells them apart by token):

- **single**: one uncapped campaign alone: the baseline throughput;
- **fair 5**, **fair 20**: 5 (20) uncapped campaigns created together: each one's share of the
  requests while all still send, Jain's index over them, and their aggregate throughput as a
  ratio of the single campaign's (issue 29: fairness must not cost more than 10% of it). The
  three alternate ``--rounds`` times (2), each judged by its own round's single campaign, since
  the load of a shared machine drifts within minutes; the summary gives the median ratios;
- **500 beside a large one**: a 500-device campaign created once a large one is under way: its
  completion time, against the same campaign alone in the same run;
- **urgent under ten bulk**: an urgent campaign of 1,000 devices created while ten bulk
  campaigns fill the fleet: create call → claimed by the dispatcher, → its first request, and
  → its 1,000th, against the same urgent campaign alone in the same run.

Every figure comes from the emulator's own record of requests (arrival times, tokens); the
time of a create call is this process's clock when the call was made. The emulator is reset
before each measurement, which makes it forget the senders' OAuth tokens: a campaign's first
request is the first one a sender started (refused once for its token, then sent again); its
1,000th counts only requests that reached FCM. Throughput is measured
over one window for every row, while all of a phase's campaigns send: from the moment the
last of them made its first request until the first of them has made 95% of its requests (the
tail, when fewer chunks are left than senders can hold, left out). Each phase waits until all
its campaigns are finished before the next starts, and records the 1-minute load average
before and after. The urgent campaign is measured ``--urgent-runs`` times, alone and under bulk
alternately: medians, with their range.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import format_table, machine, results_path, source_version, write_json
from bench.stack import BenchStack, import_devices, running_stack, wait_for_campaign
from devstack.processes import wait_until
from fcm_emulator.client import Received

LATENCY_MS = 5
"""FCM a few milliseconds away (the issue's 5 ms)."""
FINISHED = ("completed", "failed", "cancelled")
STEADY_SHARE = 0.95
"""A window ends when the first campaign of a phase has made this share of its requests."""
POLL_S = 0.05


@dataclass(frozen=True)
class Sizes:
    """How many devices each phase's campaigns reach."""

    single: int = 20_000
    fair_total: int = 40_000
    """Split evenly over the 5 (and over the 20) fair campaigns."""
    large: int = 40_000
    small: int = 500
    bulk_each: int = 4_000
    urgent: int = 1_000


@dataclass
class Row:
    """One phase's figures."""

    phase: str
    campaigns: int
    requests_in_window: int = 0
    window_s: float = 0.0
    per_s: float = 0.0
    single_per_s: float = 0.0
    """The single campaign's throughput in the same round (the row's baseline)."""
    jain: float | None = None
    shares: list[float] = field(default_factory=list)
    """Each campaign's share of the window's requests, times the number of campaigns (1: fair)."""
    claimed_s: float | None = None
    """Create call → claimed by the dispatcher (the campaign's ``started_at``)."""
    first_request_s: float | None = None
    thousand_sent_s: float | None = None
    completed_s: float | None = None
    note: str = ""
    load_average: tuple[float, float] = (0.0, 0.0)
    runs: list[Row] = field(default_factory=list)
    """The runs a row of medians was made of."""


class Population:
    """One token per device; each device's topics name the group it is in for each phase.

    The small and the urgent campaign's devices are imported first: nx-27017 has no index on
    topics, so a dispatcher pages an audience by scanning the devices in ``_id`` order, and a
    small audience at the end of 40,000 devices would wait for the scan (a second or more on
    this machine) before its first chunk, whatever its lane (docs/mongodb-stand-in.md)."""

    def __init__(self, sizes: Sizes) -> None:
        self.sizes = sizes
        self.own = sizes.small + sizes.urgent
        self.total = self.own + max(sizes.fair_total, sizes.large, 10 * sizes.bulk_each,
                                    sizes.single)

    def token(self, index: int) -> str:
        return f"lane-{index:07d}-" + "x" * 140

    def topics(self, index: int) -> list[str]:
        sizes = self.sizes
        if index < self.own:
            return ["small"] if index < sizes.small else ["urgent"]
        index -= self.own
        member = {"single": index < sizes.single, "large": index < sizes.large,
                  f"f5-{index % 5}": index < sizes.fair_total,
                  f"f20-{index % 20}": index < sizes.fair_total,
                  f"bulk-{index % 10}": index < 10 * sizes.bulk_each}
        return [topic for topic, yes in member.items() if yes]

    def devices(self) -> list[dict[str, Any]]:
        return [{"token": self.token(i), "platform": "android", "topics": self.topics(i)}
                for i in range(self.total)]

    def group_of(self, topics: Collection[str]) -> Callable[[str], str | None]:
        """Which of ``topics`` a request's token is in, if any."""
        by_token = {self.token(i): t for i in range(self.total) for t in self.topics(i)
                    if t in topics}
        return by_token.get


class Phases:
    def __init__(self, bench: BenchStack, population: Population, latency_ms: int) -> None:
        self.bench = bench
        self.population = population
        self.latency_ms = latency_ms

    # --- helpers ---------------------------------------------------------------------------------
    def create(self, topics: Sequence[str], **extra: Any) -> list[tuple[str, float]]:
        """One campaign per topic, created at once (a thread each); (id, create call time)."""
        def one(topic: str) -> tuple[str, float]:
            at = time.time()
            response = self.bench.api.post("/v1/campaigns", json={
                "title": "Lanes", "body": topic, "audience": {"topics": [topic]}, **extra})
            response.raise_for_status()
            return str(response.json()["id"]), at
        with ThreadPoolExecutor(max_workers=min(len(topics), 20)) as pool:
            return list(pool.map(one, topics))

    def finish(self, ids: Sequence[str], timeout_s: float = 600) -> None:
        for campaign_id in ids:
            wait_for_campaign(self.bench.api, campaign_id, lambda c: c["status"] in FINISHED,
                              f"campaign {campaign_id} to end", timeout_s, 0.2)

    def requests(self, *, reached_fcm: bool = True) -> list[Received]:
        """The emulator's record since its reset; ``reached_fcm``: without the requests it
        refused for an OAuth token it forgot at the reset (each sender's first, sent again)."""
        return [r for r in self.bench.emulator.received() if r.reached_fcm or not reached_fcm]

    def wait_requests(self, count: int, what: str) -> None:
        wait_until(lambda: self.bench.emulator.stats()["requests"] >= count, 120, what,
                   interval_s=POLL_S)

    def begin(self) -> float:
        self.bench.emulator.reset()
        self.bench.emulator.configure(latency_ms=self.latency_ms)
        return os.getloadavg()[0]

    # --- phases ----------------------------------------------------------------------------------
    def share(self, phase: str, topics: list[str]) -> Row:
        """Campaigns to ``topics`` created together: throughput and shares in the window."""
        load = self.begin()
        ids = [campaign_id for campaign_id, _ in self.create(topics)]
        self.finish(ids)
        row = shares_row(phase, topics, self.requests(), self.population.group_of(topics))
        row.load_average = (load, os.getloadavg()[0])
        return row

    def small_beside_large(self) -> list[Row]:
        sizes = self.population.sizes
        load = self.begin()
        alone = self.completed_in("500 alone", "small")
        alone.load_average = (load, os.getloadavg()[0])
        load = self.begin()
        [(large, _)] = self.create(["large"])
        self.wait_requests(sizes.large // 8, "the large campaign to be under way")
        beside = self.completed_in(f"500 beside {sizes.large:,}", "small")
        self.finish([large])
        beside.load_average = (load, os.getloadavg()[0])
        return [alone, beside]

    def completed_in(self, phase: str, topic: str) -> Row:
        [(campaign_id, created_at)] = self.create([topic])
        self.finish([campaign_id])
        times = self.times_of(topic)
        return Row(phase, 1, completed_s=times[-1] - created_at)

    def times_of(self, topic: str, *, reached_fcm: bool = True) -> list[float]:
        group = self.population.group_of({topic})
        return sorted(r.received_at for r in self.requests(reached_fcm=reached_fcm)
                      if group(r.token) == topic)

    def urgent(self, runs: int) -> list[Row]:
        """``runs`` times, alternating: the urgent campaign alone, then under ten bulk ones."""
        measured: dict[str, list[Row]] = {"urgent alone": [], "urgent under 10 bulk": []}
        for _ in range(runs):
            load = self.begin()
            alone = self.urgent_row("urgent alone")
            alone.load_average = (load, os.getloadavg()[0])
            measured["urgent alone"].append(alone)
            measured["urgent under 10 bulk"].append(self.urgent_under_bulk())
        return [median_row(phase, rows) for phase, rows in measured.items()]

    def urgent_under_bulk(self) -> Row:
        load = self.begin()
        bulk = [campaign_id for campaign_id, _ in self.create(
            [f"bulk-{i}" for i in range(10)], lane="bulk")]
        self.wait_requests(3 * self.population.sizes.bulk_each // 4,
                           "the bulk campaigns to be sending")
        under = self.urgent_row("urgent under 10 bulk")
        under.note = f"{sum(map(self.sending, bulk))} of 10 bulk still sending when it was done"
        self.finish(bulk)
        under.load_average = (load, os.getloadavg()[0])
        return under

    def sending(self, campaign_id: str) -> bool:
        return self.bench.api.get(f"/v1/campaigns/{campaign_id}").json()["status"] not in FINISHED

    def urgent_row(self, phase: str) -> Row:
        [(campaign_id, created_at)] = self.create(["urgent"], lane="urgent")
        campaign = wait_for_campaign(self.bench.api, campaign_id,
                                     lambda c: c["status"] in FINISHED,
                                     f"campaign {campaign_id} to end", 600, 0.2)
        first = self.times_of("urgent", reached_fcm=False)[0]
        times = self.times_of("urgent")
        thousandth = times[min(999, len(times) - 1)]
        claimed = datetime.fromisoformat(campaign["started_at"]).timestamp()
        return Row(phase, 1, claimed_s=claimed - created_at, first_request_s=first - created_at,
                   thousand_sent_s=thousandth - created_at)


def median_row(phase: str, rows: list[Row]) -> Row:
    """One row of the medians of ``rows``' timings, each with its range, and every run's note."""
    def median(pick: Callable[[Row], float | None]) -> float | None:
        values = [v for v in map(pick, rows) if v is not None]
        return statistics.median(values) if values else None
    row = Row(phase, 1, claimed_s=median(lambda r: r.claimed_s),
              first_request_s=median(lambda r: r.first_request_s),
              thousand_sent_s=median(lambda r: r.thousand_sent_s),
              load_average=(min(r.load_average[0] for r in rows),
                            max(r.load_average[1] for r in rows)))
    row.runs = rows
    row.note = "; ".join(filter(None, (r.note for r in rows)))
    return row


def shares_row(phase: str, topics: list[str], requests: list[Received],
               group_of: Callable[[str], str | None]) -> Row:
    """Throughput and each campaign's share over the steady window (see the module's doc)."""
    times: dict[str, list[float]] = {topic: [] for topic in topics}
    for request in requests:
        topic = group_of(request.token)
        if topic in times:
            times[topic].append(request.received_at)
    for arrivals in times.values():
        arrivals.sort()
    start = max(arrivals[0] for arrivals in times.values())
    end = min(arrivals[math.ceil(STEADY_SHARE * len(arrivals)) - 1] for arrivals in times.values())
    if end <= start:
        return Row(phase, len(topics), note="no moment when all sent: one was done before "
                                            "the last started")
    counts = [sum(start <= t <= end for t in times[topic]) for topic in topics]
    total = sum(counts)
    return Row(phase, len(topics), requests_in_window=total, window_s=end - start,
               per_s=total / (end - start), jain=jain([float(c) for c in counts]),
               shares=[round(len(topics) * c / total, 3) for c in counts])


def jain(shares: list[float]) -> float:
    """Jain's fairness index: 1 when every share is equal, 1/n when one takes everything."""
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))


def run(sizes: Sizes, latency_ms: int, rounds: int, urgent_runs: int) -> list[Row]:
    population = Population(sizes)
    with running_stack(senders=2, api_timeout_s=120) as bench:
        import_devices(bench.api, population.devices())
        phases = Phases(bench, population, latency_ms)
        rows = [row for index in range(1, rounds + 1) for row in fair_round(phases, index)]
        rows += phases.small_beside_large()
        rows += phases.urgent(urgent_runs)
    return rows


def fair_round(phases: Phases, index: int) -> list[Row]:
    """The single campaign, then 5 and 20 together, each judged against this round's single."""
    single = phases.share(f"single, round {index}", ["single"])
    rows = [single, phases.share(f"fair 5, round {index}", [f"f5-{i}" for i in range(5)]),
            phases.share(f"fair 20, round {index}", [f"f20-{i}" for i in range(20)])]
    for row in rows:
        row.single_per_s = single.per_s
    return rows


def summary(rows: list[Row]) -> str:
    """Each group's median ratio to its round's single campaign, and its median Jain index."""
    lines = []
    for group in ("fair 5", "fair 20"):
        mine = [r for r in rows if r.phase.startswith(group + ",") and r.per_s]
        if mine:
            ratios = [r.per_s / r.single_per_s for r in mine]
            indexes = [r.jain for r in mine if r.jain is not None]
            lines.append(f"{group}: x single {statistics.median(ratios):.2f} "
                         f"({min(ratios):.2f}-{max(ratios):.2f}), Jain "
                         f"{statistics.median(indexes):.3f} over {len(mine)} rounds")
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    return format_table(
        ["phase", "campaigns", "requests/s in window", "x single", "Jain", "shares (min-max)",
         "claimed s", "first request s", "1,000 sent s", "completed s", "load 1m", "note"],
        [(row.phase, str(row.campaigns), f"{row.per_s:,.0f}" if row.per_s else "",
          f"{row.per_s / row.single_per_s:.2f}" if row.per_s and row.single_per_s else "",
          "" if row.jain is None else f"{row.jain:.3f}",
          f"{min(row.shares):.2f}-{max(row.shares):.2f}" if row.shares else "",
          *(seconds(row, pick) for pick in (lambda r: r.claimed_s, lambda r: r.first_request_s,
                                            lambda r: r.thousand_sent_s,
                                            lambda r: r.completed_s)),
          f"{row.load_average[0]:.1f}-{row.load_average[1]:.1f}", row.note) for row in rows])


def seconds(row: Row, pick: Callable[[Row], float | None]) -> str:
    """A timing, with the range of the runs it is the median of."""
    value = pick(row)
    if value is None:
        return ""
    spread = [v for v in map(pick, row.runs) if v is not None]
    return f"{value:.2f}" + (f" ({min(spread):.2f}-{max(spread):.2f})" if len(spread) > 1 else "")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lanes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=int, default=LATENCY_MS)
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of single, fair 5 and fair 20 (each judged by its round's "
                             "single campaign)")
    parser.add_argument("--urgent-runs", type=int, default=3,
                        help="times the urgent campaign is measured alone and under bulk ones")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the single, fair, large and bulk campaigns' sizes")
    parser.add_argument("--out", type=Path, default=results_path("lanes.json"))
    args = parser.parse_args()
    at = datetime.now(UTC)
    default = Sizes()
    sizes = Sizes(single=round(default.single * args.scale),
                  fair_total=round(default.fair_total * args.scale),
                  large=round(default.large * args.scale),
                  bulk_each=round(default.bulk_each * args.scale))
    rows = run(sizes, args.latency_ms, args.rounds, args.urgent_runs)
    print(f"{at:%Y-%m-%d %H:%M} UTC, {source_version()}, FCM {args.latency_ms} ms away, 2 senders")
    print(table(rows))
    print(summary(rows))
    write_json(args.out, {"bench": "lanes", "at": at.isoformat(), "source": source_version(),
                          "machine": machine(["pymongo"]), "latency_ms": args.latency_ms,
                          "sizes": asdict(sizes), "rows": [asdict(row) for row in rows]})


if __name__ == "__main__":
    main()
