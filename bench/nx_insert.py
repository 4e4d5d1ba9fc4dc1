"""What bounds a device import on nx-27017: ``python -m bench.nx_insert`` (issue 33, point 5).

nx-27017 0.8.1 answers an ``insert`` command by inserting its documents one by one, each in a
transaction of its own (its SQLite connection is in autocommit mode), on its single thread. This
bench runs the same storage layer in this process (neosqlite, with the launcher's corrections of
``devstack/nx_server.py`` applied), on the devices collection's indexes, with the documents an
import writes, two ways, alternating ``--rounds`` times:

- **per document** (what nx-27017 does, the baseline): ``insert_one`` per document, autocommit;
- **one transaction per command**: the same ``insert_one`` calls between ``BEGIN`` and ``COMMIT``,
  a batch of ``--batch`` at a time (what the stand-in could do; a duplicate still fails alone).

No wire protocol, no BSON: the storage's own cost per document, which bounds any import through
the stand-in however fast the api is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from neosqlite import Connection

import devstack.nx_server  # noqa: F401  # the launcher's corrections, as the stand-in runs
from bench.common import format_table


def document(i: int) -> dict[str, Any]:
    """A device as ``DeviceStore.import_batch`` inserts it (timestamps left out)."""
    return {"token": f"import-{i:07d}-" + "x" * 135, "user_id": f"u{i}", "platform": "android",
            "push_enabled": True, "marketing_enabled": True, "topics": [], "locale": None,
            "timezone": None, "attributes": {}, "invalid": False}


def per_document(collection: Any, documents: list[dict[str, Any]], _batch: int) -> None:
    for one in documents:
        collection.insert_one(one)


def per_command(collection: Any, documents: list[dict[str, Any]], batch: int) -> None:
    for start in range(0, len(documents), batch):
        collection.db.execute("BEGIN")
        for one in documents[start:start + batch]:
            collection.insert_one(one)
        collection.db.execute("COMMIT")


Way = Callable[[Any, list[dict[str, Any]], int], None]
WAYS: dict[str, Way] = {"per document (nx-27017 0.8.1)": per_document,
                        "one transaction per command": per_command}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10_000, help="per way and round")
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in WAYS}
    wall: dict[str, list[float]] = {name: [] for name in WAYS}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        collection = Connection(os.path.join(folder, "bench.db"))["devices"]
        collection.create_index("token", unique=True)
        collection.create_index("user_id")
        next_id = 0
        for _ in range(args.rounds):
            for name, way in WAYS.items():
                documents = [document(i) for i in range(next_id, next_id + args.documents)]
                next_id += args.documents
                started, started_wall = time.process_time(), time.perf_counter()
                way(collection, documents, args.batch)
                rates[name].append(args.documents / (time.process_time() - started))
                wall[name].append(args.documents / (time.perf_counter() - started_wall))
    baseline = statistics.median(rates["per document (nx-27017 0.8.1)"])
    wall_baseline = statistics.median(wall["per document (nx-27017 0.8.1)"])
    print(format_table(["way", "documents/CPU-s (median)", "range", "x per document",
                        "documents/s, wall (median)", "x per document, wall"], [
        [name, f"{statistics.median(r):,.0f}", f"{min(r):,.0f}-{max(r):,.0f}",
         f"{statistics.median(r) / baseline:.1f}", f"{statistics.median(wall[name]):,.0f}",
         f"{statistics.median(wall[name]) / wall_baseline:.1f}"] for name, r in rates.items()]))
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
