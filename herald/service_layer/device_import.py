"""Importing devices at scale: a stream of lines in, batches written while the next is read.

The api reads and validates lines on its own core while the database writes the batch before
(one batch in flight: the api never holds more than two batches, whatever the file's size).
Each batch is written by the registry in at most one insert, one lookup and its updates
(``DeviceImporter.import_batch``); what each line did is counted by
``herald.domain.device_import``. An invalid line is counted and reported by number, and the rest
go on. A failed read (the client went away, the body is over its limit) ends the import after
the batch in flight is written: what was imported is whole batches, and importing the same
lines again changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from herald.clock import utcnow
from herald.contracts.device_lines import DeviceLine
from herald.domain.device_import import DeviceFields, ImportCounts, ImportReport, LineProblem
from herald.observability import DEVICES_IMPORTED
from herald.service_layer.ports import DeviceImporter

IMPORT_BATCH = 2_000
"""Devices per write. On nx-27017's single thread an insert of a batch holds every other query
for its length (it inserted 1,600-2,300 documents/s on this 2-core machine at load 8,
2026-11-27: about a second for 2,000), and a batch
with known tokens scans the collection once to read them back: larger batches scan less
often, smaller ones block less long. On MongoDB the size hardly matters above a few hundred."""


async def import_devices(devices: DeviceImporter,
                         lines: AsyncIterator[DeviceLine | LineProblem], *,
                         batch_size: int = IMPORT_BATCH,
                         clock: Callable[[], datetime] = utcnow) -> ImportReport:
    """Import every valid line of ``lines`` (upsert by token, counted line by line) and report
    what each did; invalid lines are counted and listed by number."""
    report = ImportReport()
    writer = _WriteBehind(devices, report.counts, clock)
    batch: list[DeviceFields] = []
    try:
        async for line in lines:
            if isinstance(line, LineProblem):
                report.refuse(line)
                DEVICES_IMPORTED.labels("invalid").inc()
                continue
            batch.append(line.fields)
            if len(batch) >= batch_size:
                await writer.start(batch)
                batch = []
        if batch:
            await writer.start(batch)
        await writer.finish()
    finally:
        await writer.settle()
    return report


class _WriteBehind:
    """At most one batch being written while the next is read."""

    def __init__(self, devices: DeviceImporter, counts: ImportCounts,
                 clock: Callable[[], datetime]) -> None:
        self._devices = devices
        self._counts = counts
        self._clock = clock
        self._writing: asyncio.Task[ImportCounts] | None = None

    async def start(self, batch: list[DeviceFields]) -> None:
        """Wait for the batch before, then start writing ``batch``."""
        await self.finish()
        self._writing = asyncio.ensure_future(self._devices.import_batch(batch, self._clock()))

    async def finish(self) -> None:
        """Wait for the batch in flight and count it (its failure is raised here)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            self._count(await writing)

    async def settle(self) -> None:
        """After a failed read: let the batch in flight end (its own failure, if any, is the
        lesser news and is dropped)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            await asyncio.wait([writing])
            with contextlib.suppress(Exception, asyncio.CancelledError):
                self._count(writing.result())

    def _count(self, written: ImportCounts) -> None:
        self._counts.add(written)
        for outcome, lines in (("inserted", written.inserted), ("updated", written.updated),
                               ("unchanged", written.unchanged)):
            DEVICES_IMPORTED.labels(outcome).inc(lines)
