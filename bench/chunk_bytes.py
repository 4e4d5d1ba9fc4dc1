"""What a campaign's records cost the database: ``python -m bench.chunk_bytes``

Issue 33, point 2. Two measurements on private nx-27017 servers, each with its baseline in the
same run:

1. **Bytes per recipient of the chunk documents**: ``--recipients`` recipients in chunks of 500,
   written as chunks were stored before issue 33 (an array of ``{token, user_id[, profile]}``
   subdocuments: the baseline) and as ``ChunkStore.create`` writes them now (parallel arrays),
   each into a database of its own on one server. Reported per recipient: the BSON size of the
   documents read back (what MongoDB stores, before its block compression), and on nx-27017 the
   bytes of the stored documents and of the SQLite pages of the chunks table and its indexes.
   Tokens have the shape and length of FCM's (163 characters, random); a plain campaign's chunks
   carry token and user id, a personalised one's also a profile (platform, locale and two
   attributes).
2. **The senders' lookup of a chunk's recorded outcomes** (``DeliveryStore.recorded``) with
   ``--deliveries`` delivery documents stored, on nx-27017 as the package ships it (the
   baseline: it scans) and through Herald's launcher (``devstack/nx_server.py``: the index).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
from neosqlite._sqlite import sqlite3
from pymongo import AsyncMongoClient

from bench.common import format_table, machine, results_path, source_version, write_json
from devstack.processes import free_port, wait_until
from herald import names
from herald.adapters.chunks import ChunkStore, DeliveryStore, chunk_id
from herald.adapters.mongo import Database, Document, ensure_indexes
from herald.adapters.records import to_bson
from herald.domain.documents import ChunkState, ChunkStatus, new_id
from herald.domain.messages import Profile, Recipient
from herald.domain.outcomes import RecipientOutcome, Target

CHUNK_SIZE = 500
ALPHABET = string.ascii_letters + string.digits + "-_"
LOOKUPS = 50


def fcm_token(rng: random.Random) -> str:
    """A token shaped like FCM's: an instance id, ``:APA91b``, then 134 base64url characters."""
    return ("".join(rng.choices(ALPHABET, k=22)) + ":APA91b"
            + "".join(rng.choices(ALPHABET, k=134)))


def recipients(count: int, personal: bool, rng: random.Random) -> list[Recipient]:
    return [Recipient(token=fcm_token(rng), user_id=f"user-{i:08d}",
                      profile=Profile(platform="android", locale="pt-BR",
                                      attributes={"first_name": f"Name{i}", "city": "Lisbon"})
                      if personal else None)
            for i in range(count)]


@contextmanager
def nx_server(data_dir: Path, *, launcher: bool) -> Iterator[str]:
    """An nx-27017 on a free port: through Herald's launcher, or as the package ships it."""
    port = free_port()
    module = ["-m", "devstack.nx_server"] if launcher else \
        ["-c", "from nx_27017.nx_27017 import main; main()"]
    data_dir.mkdir(parents=True)
    process = subprocess.Popen(
        [sys.executable, *module, "--data-dir", str(data_dir), "--host", "127.0.0.1",
         "-p", str(port), "--pid-file", str(data_dir / "nx.pid"),
         "--log-file", str(data_dir / "nx.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(port), 30, "nx-27017 to answer")
        yield f"mongodb://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def legacy_document(campaign_id: str, seq: int, chunk: list[Recipient],
                    now: datetime) -> Document:
    """A chunk document as ``ChunkStore.create`` wrote it before issue 33."""
    state = ChunkState(campaign_id=campaign_id, seq=seq, size=len(chunk), cursor=None,
                       status=ChunkStatus.PENDING, created_at=now)
    return {"_id": chunk_id(campaign_id, seq), **to_bson(state),
            "recipients": [r.stored() for r in chunk]}


async def write_chunks(db: Database, everyone: list[Recipient], legacy: bool) -> None:
    campaign_id, now = new_id(), datetime.now(UTC)
    store = ChunkStore(db)
    for seq, start in enumerate(range(0, len(everyone), CHUNK_SIZE)):
        chunk = everyone[start:start + CHUNK_SIZE]
        if legacy:
            await db[names.CHUNKS].insert_one(legacy_document(campaign_id, seq, chunk, now))
        else:
            await store.create(campaign_id, seq, chunk, None, now)


def stored_bytes(data_dir: Path, database: str) -> tuple[int, int]:
    """What nx-27017 stores for the chunks collection: the documents' bytes, and the SQLite
    pages of the table and its indexes (read with the WAL, so nothing waits for a checkpoint)."""
    with closing(sqlite3.connect(data_dir / f"{database}.db")) as connection:
        documents = connection.execute(f"SELECT sum(length(data)) FROM {names.CHUNKS}").fetchone()
        pages = connection.execute("SELECT sum(pgsize) FROM dbstat WHERE name = ? OR name IN "
                                   "(SELECT name FROM sqlite_master WHERE tbl_name = ?)",
                                   (names.CHUNKS, names.CHUNKS)).fetchone()
    return int(documents[0] or 0), int(pages[0] or 0)


async def chunk_sizes(url: str, data_dir: Path, count: int) -> list[dict[str, Any]]:
    rows = []
    client: AsyncMongoClient[Document] = AsyncMongoClient(url, tz_aware=True)
    for personal in (False, True):
        everyone = recipients(count, personal, random.Random(7))
        for legacy in (True, False):
            name = f"bytes_{'personal' if personal else 'plain'}_{'old' if legacy else 'new'}"
            db = client[name]
            await ensure_indexes(db)
            await write_chunks(db, everyone, legacy)
            stored = [len(bson.encode(d)) async for d in db[names.CHUNKS].find({})]
            documents, pages = stored_bytes(data_dir, name)
            rows.append({"campaign": "personalised" if personal else "plain",
                         "format": "before (subdocuments)" if legacy else "parallel arrays",
                         "bson_bytes_per_recipient": sum(stored) / count,
                         "nx_document_bytes_per_recipient": documents / count,
                         "nx_page_bytes_per_recipient": pages / count})
    await client.close()
    return rows


async def lookup_ms(url: str, deliveries: int) -> float:
    """Median milliseconds of ``DeliveryStore.recorded`` with ``deliveries`` delivery
    documents of 250 outcomes each, spread over campaigns of 2,000 chunks."""
    client: AsyncMongoClient[Document] = AsyncMongoClient(url, tz_aware=True)
    db = client[f"lookup_{deliveries}"]
    await ensure_indexes(db)
    store = DeliveryStore(db)
    campaigns = [new_id() for _ in range(max(1, deliveries // 4000))]
    outcomes = [RecipientOutcome(Target(p, ""), None) for p in range(250)]
    documents = []
    for n in range(deliveries):
        campaign, seq = campaigns[n % len(campaigns)], (n // len(campaigns)) // 2
        documents.append({"campaign_id": campaign, "seq": seq, "pod": "bench",
                          "at": datetime.now(UTC), "sent": [o.target.position for o in outcomes],
                          "failed": []})
    for start in range(0, len(documents), 5000):
        await db[names.DELIVERIES].insert_many(documents[start:start + 5000])
    rng = random.Random(3)
    timings = []
    for _ in range(LOOKUPS):
        campaign, seq = rng.choice(campaigns), rng.randrange(deliveries // len(campaigns) // 2)
        started = time.perf_counter()
        recorded = await store.recorded(campaign, seq)
        timings.append(1000 * (time.perf_counter() - started))
        assert len(recorded) == 250, len(recorded)
    await client.close()
    return statistics.median(timings)


async def lookups(run_dir: Path, sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for launcher in (False, True):
        with nx_server(run_dir / f"lookup-{launcher}", launcher=launcher) as url:
            for size in sizes:
                rows.append({"server": "Herald's launcher" if launcher else "nx-27017 as shipped",
                             "deliveries": size, "median_ms": await lookup_ms(url, size)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=100_000)
    parser.add_argument("--deliveries", type=lambda s: [int(n) for n in s.split(",")],
                        default=[20_000, 50_000])
    parser.add_argument("--output", type=Path, default=results_path("chunk_bytes.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run:
        with nx_server(Path(run) / "bytes", launcher=True) as url:
            sizes = asyncio.run(chunk_sizes(url, Path(run) / "bytes", args.recipients))
        timings = asyncio.run(lookups(Path(run), args.deliveries))
    print(f"{args.recipients:,} recipients in chunks of {CHUNK_SIZE}; {source_version()}")
    print(format_table(("campaign", "chunk format", "BSON bytes / recipient",
                        "nx-27017 document bytes / recipient",
                        "nx-27017 pages (table + indexes) bytes / recipient"),
                       [(r["campaign"], r["format"], f"{r['bson_bytes_per_recipient']:.1f}",
                         f"{r['nx_document_bytes_per_recipient']:.1f}",
                         f"{r['nx_page_bytes_per_recipient']:.1f}") for r in sizes], 2))
    print()
    print(format_table(("server", "deliveries stored", "recorded-outcomes lookup, median ms"),
                       [(r["server"], f"{r['deliveries']:,}", f"{r['median_ms']:.2f}")
                        for r in timings], 1))
    write_json(args.output, {"bench": "chunk_bytes", "recipients": args.recipients,
                             "source": source_version(), "machine": machine(["pymongo", "nx-27017"]),
                             "sizes": sizes, "lookups": timings})


if __name__ == "__main__":
    main()
