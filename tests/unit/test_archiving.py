"""What is pure in archiving finished campaigns (``herald/domain/archive.py``,
``herald/service_layer/archiving.py``): which campaigns are due, where an archive goes, the
line format, the summary and the checksum of the compressed stream."""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from herald.domain.archive import (
    ArchiveScheme,
    ArchiveUrl,
    VariantCounts,
    archive_name,
    ended_at,
    is_due,
    parse_archive_url,
)
from herald.domain.documents import Outcome
from herald.domain.status import Status
from herald.service_layer.archiving import (
    Written,
    archive_line,
    compressed,
    summary_key,
    variant_counts,
)
from herald.service_layer.recipients import RecipientLine

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)
KEPT = timedelta(days=90)


@pytest.mark.parametrize(("status", "ended", "due"), [
    (Status.COMPLETED, NOW - timedelta(days=91), True),
    (Status.CANCELLED, NOW - timedelta(days=90), True),
    (Status.FAILED, NOW - timedelta(days=89), False),
    (Status.MISSED, NOW - timedelta(days=365), True),
    (Status.IN_PROGRESS, NOW - timedelta(days=365), False),
    (Status.PAUSED, NOW - timedelta(days=365), False),
])
def test_a_campaign_is_due_once_finished_longer_than_the_retention(
        status: Status, ended: datetime, due: bool) -> None:
    assert is_due(ended_at(status, ended, ended), False, NOW, KEPT) is due


def test_an_archived_campaign_is_never_due_again() -> None:
    old = NOW - timedelta(days=400)
    assert not is_due(ended_at(Status.COMPLETED, old, old), True, NOW, KEPT)


def test_without_a_finish_its_last_change_counts_as_its_end() -> None:
    changed = NOW - timedelta(days=100)
    assert ended_at(Status.COMPLETED, None, changed) == changed
    assert ended_at(Status.PENDING, None, changed) is None


def test_archive_urls() -> None:
    assert parse_archive_url("file:///var/lib/herald/archive/") == ArchiveUrl(
        ArchiveScheme.FILE, "/var/lib/herald/archive/")
    s3 = parse_archive_url("s3://audits/herald/prod/")
    assert s3 == ArchiveUrl(ArchiveScheme.S3, "audits", "herald/prod")
    name = archive_name("65f0a1b2c3d4e5f607182930")
    assert name == "campaign-65f0a1b2c3d4e5f607182930.ndjson.gz"
    assert s3.location(name) == f"s3://audits/herald/prod/{name}"
    assert parse_archive_url("s3://audits").location(name) == f"s3://audits/{name}"
    assert parse_archive_url("file:///a/b/").location(name) == f"file:///a/b/{name}"


@pytest.mark.parametrize("url", ["http://x/y", "file://host/dir", "file:relative", "s3:///key",
                                 "/plain/path"])
def test_other_archive_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"file:///|s3://bucket"):
        parse_archive_url(url)


def test_a_line_is_the_audit_exports_and_an_erased_place_keeps_only_its_outcome() -> None:
    line = RecipientLine("tok-1", "u1", Outcome.FAILED, "UNREGISTERED", "pt-BR")
    assert archive_line(line) == {"token": "tok-1", "user_id": "u1", "outcome": "failed",
                                  "error": "UNREGISTERED", "variant": "pt-BR", "rule": None}
    assert archive_line(line) == line.as_dict()
    erased = RecipientLine("", None, Outcome.SENT, erased=True)
    assert archive_line(erased) == {"token": "", "erased": True, "outcome": "sent",
                                    "error": None}
    assert summary_key(erased) == "erased" and summary_key(line) == "pt-BR"


def test_the_summary_counts_each_variant_by_outcome() -> None:
    tally = Counter({("default", Outcome.SENT): 3, ("fr", Outcome.UNSENT): 2,
                     ("default", Outcome.FAILED): 1, ("fr", Outcome.SUPPRESSED): 4})
    assert variant_counts(tally) == {"default": VariantCounts(sent=3, failed=1),
                                     "fr": VariantCounts(unsent=2, suppressed=4)}


async def _lines(count: int) -> AsyncIterator[RecipientLine]:
    for i in range(count):
        yield RecipientLine(f"tok-{i}", f"u{i}", Outcome.SENT if i % 3 else Outcome.UNSENT)


@pytest.mark.parametrize("count", [0, 1, 4999])
async def test_the_stream_is_gzip_ndjson_and_its_checksum_is_of_the_bytes_written(
        count: int) -> None:
    written = Written()
    data = b"".join([block async for block in compressed(_lines(count), written)])
    assert written.digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert written.size == len(data) and written.lines == count
    lines = [orjson.loads(raw) for raw in gzip.decompress(data).splitlines()]
    assert len(lines) == count
    assert [line["token"] for line in lines] == [f"tok-{i}" for i in range(count)]
    assert sum(written.tally.values()) == count


async def test_the_same_lines_make_the_same_file() -> None:
    """A replica that archives again after a lost claim writes the very same bytes."""
    first, second = Written(), Written()
    a = b"".join([b async for b in compressed(_lines(700), first)])
    b = b"".join([b async for b in compressed(_lines(700), second)])
    assert a == b and first.digest.hexdigest() == second.digest.hexdigest()
