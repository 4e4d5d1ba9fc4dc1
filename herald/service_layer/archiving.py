"""A finished campaign's per-recipient records, archived then deleted (issue 33): the api's part
of keeping the database the size it needs (``recover(now)``, run by the api's background loop,
beside ``retention.py``).

Once a campaign has been finished for ``HERALD_RETENTION_DAYS``, one api replica claims it (a
lease on the campaign document, as a dispatcher claims one to page it), writes its audit (every
line of ``recipients.audit``, sent, failed, unsent, then suppressed, an erased person's place as a
placeholder without anything of theirs) as one gzip NDJSON file to the archive target, reads the
file back and compares its SHA-256 with what it wrote, records where it is on the campaign
(``archive``, with a summary per variant), and only then deletes the campaign's chunks and
deliveries. An archive that cannot be verified (its file reads back otherwise, or holds
fewer lines than the campaign targeted) keeps the campaign claimed until the lease ends, so
the campaigns after it are archived meanwhile and it is tried again then. A replica that dies
half-way leaves either no record (the next claim after the
lease writes the same file again) or a record without ``purged_at`` (the next run deletes).

Without an archive target nothing is deleted: audit data is never lost silently. The campaigns
that wait are counted (``herald_retention_waiting_campaigns``) and logged at every run.

A campaign that a follow-up still pages (a retarget, an amend, a retry reads its original's
audit) keeps its records until that follow-up has finished.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson

from herald.domain.archive import (
    ERASED_VARIANT,
    ArchiveRecord,
    VariantCounts,
    archive_name,
    erased_line,
)
from herald.domain.documents import Campaign, Outcome
from herald.domain.status import TERMINAL
from herald.observability import (
    ARCHIVE_FAILURES,
    ARCHIVED_CAMPAIGNS,
    RETENTION_DELETED,
    RETENTION_WAITING,
)
from herald.service_layer.ports import ArchiveTarget, CampaignArchival, CampaignRecords
from herald.service_layer.recipients import RecipientLine, audit

log = logging.getLogger(__name__)

OUTCOMES = tuple(Outcome)
"""The archive's order: the audit of each outcome in turn (sent, failed, unsent, suppressed),
each in chunk order; together every recipient the campaign targeted."""
LINES_PER_BLOCK = 2000
GZIP_WBITS = 31
"""zlib's gzip container (RFC 1952): a file ``gzip -d`` and Python's ``gzip`` read."""


@dataclass(frozen=True)
class ArchivePolicy:
    kept: timedelta
    """``HERALD_RETENTION_DAYS``."""
    every_s: float = 300.0
    """How often the api looks for campaigns due (``HERALD_RETENTION_INTERVAL_S``)."""
    lease: timedelta = timedelta(minutes=15)
    """How long a claim holds a campaign; a 1,000,000-line archive takes about a minute."""
    per_run: int = 20
    """Campaigns archived at most per run (the next run takes the rest)."""


def archive_line(line: RecipientLine) -> dict[str, Any]:
    """One archive line: the audit export's fields; an erased person's place says only that
    (and its outcome, so that the archive's lines add up to the campaign's counts)."""
    if line.erased:
        return erased_line({"outcome": line.outcome.value, "error": line.error})
    return line.as_dict()


def summary_key(line: RecipientLine) -> str:
    return ERASED_VARIANT if line.erased else line.variant


def variant_counts(tally: Counter[tuple[str, Outcome]]) -> dict[str, VariantCounts]:
    """``tally`` (lines by variant and outcome) as the campaign keeps it."""
    variants = sorted({variant for variant, _ in tally})
    return {v: VariantCounts(sent=tally[v, Outcome.SENT], failed=tally[v, Outcome.FAILED],
                             unsent=tally[v, Outcome.UNSENT],
                             suppressed=tally[v, Outcome.SUPPRESSED]) for v in variants}


@dataclass
class Written:
    """What went into an archive while it streamed out."""

    lines: int = 0
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    tally: Counter[tuple[str, Outcome]] = field(default_factory=Counter)

    def count(self, line: RecipientLine) -> None:
        self.lines += 1
        self.tally[summary_key(line), line.outcome] += 1

    def out(self, block: bytes) -> bytes:
        self.size += len(block)
        self.digest.update(block)
        return block


def _encode(block: Iterable[dict[str, Any]], compressor: Any, last: bool) -> bytes:
    raw = b"".join(orjson.dumps(line) + b"\n" for line in block)
    out: bytes = compressor.compress(raw)
    return out + compressor.flush() if last else out


async def compressed(lines: AsyncIterator[RecipientLine], written: Written) -> AsyncIterator[bytes]:
    """``lines`` as gzip NDJSON blocks, compressed in a worker thread (the api's loop serves
    requests meanwhile); ``written`` counts them and hashes what leaves."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, GZIP_WBITS)
    block: list[dict[str, Any]] = []
    async for line in lines:
        written.count(line)
        block.append(archive_line(line))
        if len(block) >= LINES_PER_BLOCK:
            yield written.out(await asyncio.to_thread(_encode, block, compressor, False))
            block = []
    yield written.out(await asyncio.to_thread(_encode, block, compressor, True))


async def every_line(records: CampaignRecords, campaign: Campaign) -> AsyncIterator[RecipientLine]:
    """The campaign's whole audit, erased places included: the export's own rows."""
    for outcome in OUTCOMES:
        async for line in audit(records, campaign, outcome, in_place=True):
            yield line


class ArchivePass:
    """What the archivist and the archive eraser (``archive_erasure.py``) share: the target,
    this pod, the policy, and a pass at most every ``every_s`` (the api's loop asks more often)."""

    def __init__(self, target: ArchiveTarget | None, pod_id: str, policy: ArchivePolicy) -> None:
        self._target = target
        self._pod_id = pod_id
        self._policy = policy
        self._ran_at = -float("inf")

    async def recover(self, now: datetime) -> None:
        """A pass (``run``), unless one ran less than ``every_s`` ago."""
        if time.monotonic() - self._ran_at < self._policy.every_s:
            return
        self._ran_at = time.monotonic()
        await self.run(now)

    async def run(self, now: datetime) -> list[Campaign]:
        raise NotImplementedError


class ArchiveRefused(Exception):
    """The archive could not be verified: nothing of the campaign is deleted."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Archivist(ArchivePass):
    """Archives and deletes the records of finished campaigns past the retention."""

    def __init__(self, records: CampaignRecords, archival: CampaignArchival,
                 target: ArchiveTarget | None, pod_id: str, policy: ArchivePolicy) -> None:
        super().__init__(target, pod_id, policy)
        self._records = records
        self._archival = archival

    async def run(self, now: datetime) -> list[Campaign]:
        """One pass, now: the campaigns archived by this pod."""
        ended_before = now - self._policy.kept
        if self._target is None:
            await self._waiting(ended_before)
            return []
        due = await self._archival.due(ended_before, now, self._policy.per_run)
        archived = [done for campaign in due
                    if (done := await self._archive(campaign, self._target, now)) is not None]
        for campaign in await self._archival.unpurged(self._policy.per_run):
            await self._purge(campaign, now)
        RETENTION_WAITING.set(await self._archival.count_due(ended_before))
        return archived

    async def _waiting(self, ended_before: datetime) -> None:
        waiting = await self._archival.count_due(ended_before)
        RETENTION_WAITING.set(waiting)
        if waiting:
            log.warning("%d finished campaigns are past HERALD_RETENTION_DAYS; their records "
                        "are kept until HERALD_ARCHIVE_URL names where to archive them", waiting)

    async def _archive(self, campaign: Campaign, target: ArchiveTarget,
                       now: datetime) -> Campaign | None:
        if await self._followed_up(campaign.id):
            return None
        claimed = await self._archival.claim(campaign.id, self._pod_id, now,
                                             now + self._policy.lease)
        if claimed is None:
            return None
        try:
            record, variants = await self._write(claimed, target, now)
        except ArchiveRefused as refused:  # kept claimed until the lease ends: tried again
            ARCHIVE_FAILURES.labels(refused.reason).inc()  # then, the others go ahead meanwhile
            log.error("campaign %s not archived, its records kept: %s", campaign.id, refused)
            return None
        except BaseException:  # the target failed (or the api stops): another run tries again
            await asyncio.shield(self._archival.release(campaign.id, self._pod_id))
            raise
        marked = await self._archival.mark_archived(campaign.id, self._pod_id, record, variants)
        if marked is None:
            return None  # the claim ran out and another replica archived it
        ARCHIVED_CAMPAIGNS.inc()
        log.info("campaign %s archived to %s (%d lines, %d bytes, sha256 %s)", campaign.id,
                 record.location, record.lines, record.bytes, record.sha256)
        await self._purge(marked, now)
        return marked

    async def _write(self, campaign: Campaign, target: ArchiveTarget,
                     now: datetime) -> tuple[ArchiveRecord, dict[str, VariantCounts]]:
        name = archive_name(campaign.id)
        written = Written()
        await target.put(name, compressed(every_line(self._records, campaign), written))
        sha256 = written.digest.hexdigest()
        stored = await target.sha256(name)
        if stored != sha256:
            raise ArchiveRefused("checksum", f"{name} reads back as {stored}, written {sha256}")
        if written.lines != campaign.counts.targeted:
            raise ArchiveRefused("count", f"{written.lines} lines for "
                                          f"{campaign.counts.targeted} targeted")
        record = ArchiveRecord(at=now, location=target.location(name), sha256=sha256,
                               lines=written.lines, bytes=written.size)
        return record, variant_counts(written.tally)

    async def _followed_up(self, campaign_id: str) -> bool:
        """A follow-up of it still pages its audit (its records must stay until it is done)."""
        follow_ups = await self._records.campaigns.follow_ups_of(campaign_id)
        return any(f.status not in TERMINAL for f in follow_ups)

    async def _purge(self, campaign: Campaign, now: datetime) -> None:
        if await self._followed_up(campaign.id):
            return  # a follow-up made in the instant of the archive: its records wait for it
        chunks, deliveries = await self._archival.purge(campaign.id)
        await self._archival.mark_purged(campaign.id, now)
        RETENTION_DELETED.labels("chunks").inc(chunks)
        RETENTION_DELETED.labels("deliveries").inc(deliveries)
        log.info("campaign %s: %d chunks and %d deliveries deleted after their archive",
                 campaign.id, chunks, deliveries)
