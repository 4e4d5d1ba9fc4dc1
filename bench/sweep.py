"""The dispatchers' sweep at many running campaigns: ``python -m bench.sweep``

Issue 29: nothing in the background work reads "the 100 oldest"; with 1,000 campaigns in
progress at once every sweep sees all of them, and its CPU must grow linearly or better. This
bench runs a real dispatcher pod in its own process (``services.dispatcher.main.compose`` over
``running_pod``, as ``python -m services.dispatcher`` builds it) against a private nx-27017,
RabbitMQ vhost and Redis namespace, puts running campaigns straight into the store, and times
the sweep: each protocol's ``recover(now)`` in the order the dispatcher runs them.

Every campaign is as the issue's case leaves it: ``in_progress``, capped at 1/s, paged (its
dispatcher done), with one pending chunk of ``--recipients`` recipients, written ten minutes
ago. Half the chunks are held by one of two live senders (their heartbeats written by the
bench), the other half wait unclaimed in the ``paced`` queue (their messages published), as
capped chunks beyond the senders' prefetch do.

The sizes (``--sizes``, 100 and 1,000 by default) are measured one after another in the same
run, on the same stack: the larger adds campaigns to the smaller. Each measured sweep is a full
one, every throttled part due (the rescue runs at most twice per heartbeat TTL, the settler's
reconciliation every 2.5 s: the sweeps are spaced so that both run every time), so a row is the
most one sweep costs. Reported per sweep, medians of ``--sweeps``: the dispatcher's CPU (this
process, ``time.process_time``), nx-27017's CPU (``/proc``), the wall time, and each part's
share. RabbitMQ and Redis are shared with other stacks and not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvloop

from bench.common import (
    format_table,
    machine,
    process_cpu_s,
    results_path,
    source_version,
    write_json,
)
from devstack.isolation import private_stack
from devstack.stack import Stack
from herald.clock import utcnow
from herald.domain.documents import CampaignContent, CampaignCounts, Dispatch, Progress
from herald.domain.messages import Recipient
from herald.domain.pods import PodBeat
from herald.domain.status import Status
from herald.runtime.worker import PodParts, running_pod
from herald.service_layer.campaigns import new_campaign
from herald.settings import Settings
from services.dispatcher.main import Dispatcher, compose

SENDERS = ("bench-sender-1", "bench-sender-2")
"""The live senders the bench announces; they hold every other chunk."""
HEARTBEAT_INTERVAL_S = 0.5
"""The e2e tier's: heartbeat TTL 1.5 s, so the rescue is due every 0.75 s."""
SPACING_S = 2.6
"""Between measured sweeps: the settler reconciles at most every 2.5 s."""
WRITTEN_AGO = timedelta(minutes=10)

Recover = Callable[[datetime], Awaitable[object]]


@dataclass
class Row:
    campaigns: int
    sweeps: int
    dispatcher_ms: list[float] = field(default_factory=list)
    nx_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    parts: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Each recovery's share of a sweep: ``dispatcher``, ``nx`` and ``wall`` ms."""
    load_average: tuple[float, float] = (0.0, 0.0)
    """1-minute load average before and after the row."""

    @property
    def dispatcher(self) -> float:
        return statistics.median(self.dispatcher_ms)

    @property
    def nx(self) -> float:
        return statistics.median(self.nx_ms)

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_ms)


def settings_for(stack: Stack) -> Settings:
    config = stack.config
    return Settings(mongodb_url=config.mongodb_url, rabbitmq_url=config.rabbitmq_url,
                    redis_url=config.redis_url, fcm_endpoint=config.fcm_url,
                    heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                    sweep_interval_s=3600.0)  # the pod's own loop sweeps once, at start


async def announce_senders(parts: PodParts) -> None:
    for pod_id in SENDERS:
        await parts.resources.registry.beat(PodBeat(id=pod_id, service="sender", host="bench",
                                                    pid=os.getpid(), version="bench",
                                                    started_at=time.time()))


async def add_campaigns(parts: PodParts, count: int, recipients: int, first: int) -> None:
    """``count`` running campaigns capped at 1/s, paged, one pending chunk each (every other
    one held by a live sender, the rest published to the ``paced`` queue)."""
    stores, bus = parts.resources.stores, parts.resources.bus
    now = utcnow()
    written = now - WRITTEN_AGO
    for index in range(first, first + count):
        fresh = new_campaign(content=CampaignContent(title="Sweep", body="bench"),
                             name=f"sweep-{index}", audience=None, follow_up=None,
                             chunk_size=500, rate_per_s=1, due_at=written, now=written,
                             source="bench")
        campaign = replace(fresh, status=Status.IN_PROGRESS, started_at=written,
                           dispatch=Dispatch(owner="bench-dispatcher", next_seq=1, done=True),
                           progress=Progress(chunks_published=1),
                           counts=CampaignCounts(targeted=recipients))
        await stores.campaigns.insert(campaign)
        chunk = [Recipient(token=f"sweep-{index:05d}-{i:03d}-" + "x" * 140)
                 for i in range(recipients)]
        await stores.chunks.create(campaign.id, 0, chunk, None, written)
        if index % 2:
            await bus.send_chunk(campaign.chunk_message(0, chunk))
        else:
            await stores.chunks.claim(campaign.id, 0, SENDERS[index // 2 % 2], None,
                                      now + timedelta(hours=1))


def recoveries(dispatcher: Dispatcher) -> Sequence[Recover]:
    """The sweep's parts, in the order ``Dispatcher._sweep`` runs them."""
    return dispatcher._recoveries


def part_name(recover: Recover) -> str:
    return getattr(recover, "__qualname__", repr(recover)).removesuffix(".recover")


async def one_sweep(parts: PodParts, dispatcher: Dispatcher, nx_pid: int, row: Row) -> None:
    """A full sweep, as ``Dispatcher._sweep`` runs it, each part timed."""
    await announce_senders(parts)
    nx_before, wall_before, cpu_before = process_cpu_s(nx_pid), time.perf_counter(), \
        time.process_time()
    for recover in recoveries(dispatcher):
        part = row.parts.setdefault(part_name(recover), {"dispatcher": [], "nx": [], "wall": []})
        started = time.process_time(), process_cpu_s(nx_pid), time.perf_counter()
        await recover(utcnow())
        ended = time.process_time(), process_cpu_s(nx_pid), time.perf_counter()
        for what, before, after in zip(("dispatcher", "nx", "wall"), started, ended, strict=True):
            part[what].append(1000 * (after - before))
    row.dispatcher_ms.append(1000 * (time.process_time() - cpu_before))
    row.wall_ms.append(1000 * (time.perf_counter() - wall_before))
    row.nx_ms.append(1000 * (process_cpu_s(nx_pid) - nx_before))


async def measure(settings: Settings, nx_pid: int, sizes: Sequence[int], sweeps: int,
                  recipients: int) -> list[Row]:
    rows: list[Row] = []
    async with running_pod("dispatcher", settings, acknowledges_cancels=True,
                           compose=compose) as (parts, worker):
        assert isinstance(worker, Dispatcher)
        await announce_senders(parts)
        present = 0
        for size in sorted(sizes):
            await add_campaigns(parts, size - present, recipients, present)
            present = size
            row = Row(campaigns=size, sweeps=sweeps)
            load_before = os.getloadavg()[0]
            await one_sweep(parts, worker, nx_pid, Row(size, 1))  # warm: first reads, offers
            for _ in range(sweeps):
                await asyncio.sleep(SPACING_S)
                await one_sweep(parts, worker, nx_pid, row)
            row.load_average = (load_before, os.getloadavg()[0])
            rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    base = rows[0]
    return format_table(
        ["running campaigns", "dispatcher CPU ms/sweep", "x first row", "nx-27017 CPU ms/sweep",
         "x first row", "wall ms/sweep", "load 1m (before-after)"],
        [(f"{row.campaigns:,}", f"{row.dispatcher:.1f}", f"{row.dispatcher / base.dispatcher:.1f}",
          f"{row.nx:.0f}", f"{row.nx / base.nx:.1f}" if base.nx else "-", f"{row.wall:.0f}",
          f"{row.load_average[0]:.1f}-{row.load_average[1]:.1f}") for row in rows])


def parts_table(rows: list[Row]) -> str:
    """Each part of the sweep, medians, every size side by side."""
    def cells(row: Row, name: str) -> list[str]:
        part = row.parts[name]
        return [f"{statistics.median(part[what]):.1f}" for what in ("dispatcher", "nx", "wall")]
    header = [f"{row.campaigns:,}: {what}" for row in rows
              for what in ("dispatcher CPU ms", "nx-27017 CPU ms", "wall ms")]
    return format_table(["part of the sweep", *header],
                        [(name, *(cell for row in rows for cell in cells(row, name)))
                         for name in rows[0].parts])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--recipients", type=int, default=5,
                        help="recipients in each campaign's pending chunk")
    parser.add_argument("--out", type=Path, default=results_path("sweep.json"))
    args = parser.parse_args()
    at = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as run_dir, private_stack(Path(run_dir)) as stack:
        nx_pid = stack.start_mongodb().pid
        rows = uvloop.run(measure(settings_for(stack), nx_pid, args.sizes, args.sweeps,
                                  args.recipients))
    print(f"{at:%Y-%m-%d %H:%M} UTC, {source_version()}")
    print(table(rows))
    print()
    print(parts_table(rows))
    record: dict[str, Any] = {"bench": "sweep", "at": at.isoformat(), "source": source_version(),
                              "machine": machine(["pymongo", "nx-27017"]),
                              "recipients_per_chunk": args.recipients,
                              "rows": [asdict(row) for row in rows]}
    write_json(args.out, record)


if __name__ == "__main__":
    main()
