"""The database over 30 simulated days of daily campaigns, with retention and without:
``python -m bench.retention``

Issue 33, point 3: "the database size is flat over 30 simulated days of daily 100,000-device
campaigns, and the space is reused". Two databases on one private nx-27017 get the same
campaigns: each simulated day one campaign of ``--devices`` recipients, finished that day, its
records as the pipeline leaves them (chunks of 500 recipients with FCM-sized tokens and user
ids, deliveries in groups of 125, 1% failed ``UNREGISTERED``). Then, in the ``retention``
database only, the api's archivist runs with the fake clock at that day
(``Archivist.run(now)``, ``HERALD_RETENTION_DAYS`` = ``--retention-days``) to a directory
target: what finished more than the retention ago is archived, read back, and deleted. The
``baseline`` database keeps everything (no ``HERALD_ARCHIVE_URL``): the same run's comparison.

After each day, per database: documents in ``chunks`` and ``deliveries`` and nx-27017's
``dbStats`` (``dataSize``, ``storageSize``: the SQLite file's pages) and the file's size on
disk (its write-ahead log apart, in the JSON record). Flat means: after the retention window
the retention database's storage stops growing (``growth after window``) while the baseline's
grows by a campaign a day; reused means its file stays the size it reached (SQLite puts
deleted pages on its free list and the next inserts take them).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pymongo import AsyncMongoClient

from bench.common import format_table, machine, results_path, source_version, write_json
from devstack.processes import free_port
from devstack.stack import Stack, StackConfig
from herald.adapters import mongo
from herald.adapters.archival import ArchivalStore
from herald.adapters.archives import DirectoryArchive
from herald.adapters.mongo import Database, Document
from herald.domain.archive import parse_archive_url
from herald.domain.audience import Audience
from herald.domain.documents import CampaignContent, CampaignCounts, Dispatch, Progress
from herald.domain.fcm_errors import FcmError
from herald.domain.messages import Recipient
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.status import Status
from herald.runtime.stores import mongo_stores
from herald.service_layer.archiving import ArchivePolicy, Archivist
from herald.service_layer.campaigns import new_campaign
from herald.service_layer.ports import Stores

START = datetime(2026, 1, 1, 9, tzinfo=UTC)
CHUNK = 500
GROUP = 125
"""Outcomes per delivery document: a quarter of the sender's batch (docs/design.md)."""
TOKEN_CHARS = 152
"""About an FCM registration token's length."""


def token(i: int) -> str:
    digest = hashlib.sha256(str(i).encode()).hexdigest()
    return (digest * 3)[:TOKEN_CHARS]


@dataclass
class Day:
    day: int
    chunks: int
    deliveries: int
    data_bytes: int
    storage_bytes: int
    file_bytes: int
    """The SQLite file (its write-ahead log apart)."""
    wal_bytes: int


@dataclass
class Series:
    name: str
    days: list[Day] = field(default_factory=list)
    archive_s: list[float] = field(default_factory=list)
    archive_bytes: int = 0
    archived_lines: int = 0


async def write_campaign(stores: Stores, devices: int, day: datetime, salt: int) -> None:
    """One finished campaign of ``devices`` recipients, its records as senders leave them."""
    campaign = new_campaign(content=CampaignContent(title="Daily", body="News"), name="daily",
                            audience=Audience(), follow_up=None, chunk_size=CHUNK,
                            rate_per_s=None, due_at=day, now=day, source="bench")
    chunks = -(-devices // CHUNK)
    campaign = replace(campaign, status=Status.COMPLETED, finished_at=day, updated_at=day,
                       dispatch=Dispatch(owner="bench", next_seq=chunks, done=True),
                       progress=Progress(chunks_published=chunks, chunks_done=chunks),
                       counts=CampaignCounts(targeted=devices, sent=devices - devices // 100,
                                             failed=devices // 100))
    await stores.campaigns.insert(campaign)
    for seq in range(chunks):
        first = seq * CHUNK
        numbers = range(first, min(first + CHUNK, devices))
        recipients = [Recipient.model_construct(token=token(salt + i), user_id=f"user-{i}",
                                                profile=None) for i in numbers]
        await stores.chunks.create(campaign.id, seq, recipients, cursor=None, now=day)
        for start in range(0, len(recipients), GROUP):
            outcomes = [RecipientOutcome(Target(p, recipients[p].token),
                                         FcmError.UNREGISTERED if (first + p) % 100 == 0 else None)
                        for p in range(start, min(start + GROUP, len(recipients)))]
            await stores.deliveries.record(campaign.id, seq, "bench-sender", outcomes, day)


async def measure(db: Database, data_dir: Path, name: str, day: int) -> Day:
    stats: Document = await db.command("dbStats")
    file, wal = data_dir / f"{name}.db", data_dir / f"{name}.db-wal"
    return Day(day=day, chunks=await db["chunks"].count_documents({}),
               deliveries=await db["deliveries"].count_documents({}),
               data_bytes=int(stats["dataSize"]), storage_bytes=int(stats["storageSize"]),
               file_bytes=file.stat().st_size,
               wal_bytes=wal.stat().st_size if wal.exists() else 0)


async def simulate(args: argparse.Namespace, port: int, data_dir: Path,
                   archive_dir: Path) -> tuple[Series, Series]:
    client: AsyncMongoClient[Document] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true", tz_aware=True)
    dbs = {name: client[name] for name in ("retention", "baseline")}
    for db in dbs.values():
        await mongo.ensure_indexes(db)
    target = DirectoryArchive(parse_archive_url(f"file://{archive_dir}"))
    archivist = Archivist(mongo_stores(dbs["retention"]), ArchivalStore(dbs["retention"]), target,
                          "bench-api", ArchivePolicy(kept=timedelta(days=args.retention_days),
                                                     every_s=0.0, per_run=10))
    series = {name: Series(name) for name in dbs}
    try:
        for day in range(args.days):
            now = START + timedelta(days=day)
            for db in dbs.values():
                await write_campaign(mongo_stores(db), args.devices, now, salt=day * 10_000_000)
            started = time.perf_counter()
            archived = await archivist.run(now + timedelta(hours=1))
            if archived:
                series["retention"].archive_s.append(time.perf_counter() - started)
            for campaign in archived:
                assert campaign.archive is not None
                series["retention"].archive_bytes += campaign.archive.bytes
                series["retention"].archived_lines += campaign.archive.lines
            for name, db in dbs.items():
                series[name].days.append(await measure(db, data_dir, name, day + 1))
            print(f"day {day + 1}: " + "  ".join(
                f"{name} {series[name].days[-1].storage_bytes / 1e6:.1f} MB" for name in dbs),
                flush=True)
    finally:
        await client.close()
    return series["retention"], series["baseline"]


def growth(series: Series, after_day: int) -> int:
    """Storage added from the end of ``after_day`` to the last day."""
    by_day = {d.day: d.storage_bytes for d in series.days}
    return by_day[series.days[-1].day] - by_day[after_day]


def report(args: argparse.Namespace, kept: Series, baseline: Series) -> str:
    window = int(args.retention_days) + 2  # the first day whose archive ran with a full window
    rows = []
    for ours, theirs in zip(kept.days, baseline.days, strict=True):
        rows.append((str(ours.day), f"{ours.chunks + ours.deliveries:,}",
                     f"{ours.storage_bytes / 1e6:.1f}", f"{ours.file_bytes / 1e6:.1f}",
                     f"{theirs.chunks + theirs.deliveries:,}", f"{theirs.storage_bytes / 1e6:.1f}",
                     f"{theirs.file_bytes / 1e6:.1f}",
                     f"{ours.storage_bytes / theirs.storage_bytes:.2f}"))
    table = format_table(("day", "ret. docs", "ret. storage MB", "ret. file MB", "base docs",
                          "base storage MB", "base file MB", "ret/base"), rows)
    lines = [table, "",
             f"growth from day {window} to day {args.days}: retention "
             f"{growth(kept, window) / 1e6:+.1f} MB, baseline {growth(baseline, window) / 1e6:+.1f} MB"]
    if kept.archived_lines:
        lines.append(f"archives: {kept.archived_lines:,} lines, "
                     f"{kept.archive_bytes / kept.archived_lines:.1f} bytes per recipient (gzip); "
                     f"one campaign archived and deleted in {min(kept.archive_s):.1f}"
                     f"-{max(kept.archive_s):.1f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=10_000,
                        help="recipients of each daily campaign (the issue's: 100000)")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--retention-days", type=float, default=7.0,
                        help="HERALD_RETENTION_DAYS of the retention database")
    parser.add_argument("--json", type=Path, default=results_path("retention.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="herald-bench-retention-") as scratch:
        run_dir = Path(scratch)
        stack = Stack(StackConfig(run_dir=run_dir, mongodb_port=free_port()))
        stack.start_mongodb()
        started = time.perf_counter()
        try:
            kept, baseline = asyncio.run(simulate(args, stack.config.mongodb_port,
                                                  run_dir / "mongodb", run_dir / "archive"))
        finally:
            stack.stop(timeout_s=10)
    text = report(args, kept, baseline)
    print(text)
    print(f"load average {os.getloadavg()}, {time.perf_counter() - started:.0f} s")
    write_json(args.json, {"bench": "retention", "source_version": source_version(),
                           "machine": machine(["pymongo", "nx-27017"]), "args": vars(args) | {
                               "json": str(args.json)},
                           "load_average": os.getloadavg(),
                           "series": [asdict(kept), asdict(baseline)], "report": text})


if __name__ == "__main__":
    main()
