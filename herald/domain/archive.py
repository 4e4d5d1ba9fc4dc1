"""What a finished campaign keeps once its per-recipient records are deleted (issue 33).

A campaign's chunks and deliveries say, recipient by recipient, who got what; after
``HERALD_RETENTION_DAYS`` they are written to an archive (one gzip NDJSON file per campaign:
the audit's lines) and then deleted. The campaign itself stays forever: its content, its counts,
its operator log, a summary per variant, and where its archive is with the archive's SHA-256,
so that anyone holding the file can tell it is the one Herald wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from herald.domain.status import TERMINAL, Status

ERASED_VARIANT = "erased"
"""The summary's key for erased recipients: counted, but their variant went with their data."""


@dataclass(frozen=True, slots=True)
class VariantCounts:
    """One variant's recipients of a finished campaign, by outcome."""

    sent: int = 0
    failed: int = 0
    unsent: int = 0
    suppressed: int = 0


@dataclass(frozen=True, slots=True)
class ArchiveRecord:
    """Where a campaign's per-recipient records went, and how to check the file."""

    at: datetime
    location: str
    """``file:///dir/campaign-<id>.ndjson.gz`` or ``s3://bucket/prefix/campaign-<id>.ndjson.gz``."""
    sha256: str
    """Of the stored (compressed) bytes, as read back from the target before anything was deleted."""
    lines: int
    bytes: int
    purged_at: datetime | None = None
    """When the chunks and deliveries were deleted (None: archived, not deleted yet)."""
    rewritten_at: datetime | None = None
    """When the file was last rewritten without people erased after it was written
    (``service_layer/archive_erasure.py``); ``sha256`` and ``bytes`` are of the new file."""


class ArchiveScheme(StrEnum):
    FILE = "file"
    S3 = "s3"


@dataclass(frozen=True, slots=True)
class ArchiveUrl:
    """``HERALD_ARCHIVE_URL`` taken apart: a directory, or a bucket and a key prefix."""

    scheme: ArchiveScheme
    root: str
    """The directory (file) or the bucket (s3)."""
    prefix: str = ""
    """The keys' prefix inside the bucket, without slashes at either end (s3 only)."""

    def location(self, name: str) -> str:
        if self.scheme is ArchiveScheme.FILE:
            return f"file://{self.root.rstrip('/')}/{name}"
        return f"s3://{self.root}/{self.key(name)}"

    def key(self, name: str) -> str:
        """The object key of ``name`` (s3)."""
        return f"{self.prefix}/{name}" if self.prefix else name


def parse_archive_url(url: str) -> ArchiveUrl:
    """``file:///absolute/dir`` or ``s3://bucket[/prefix]``; ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme == ArchiveScheme.FILE:
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"{url!r}: a directory is file:///absolute/path")
        return ArchiveUrl(ArchiveScheme.FILE, parts.path)
    if parts.scheme == ArchiveScheme.S3:
        if not parts.netloc:
            raise ValueError(f"{url!r}: an S3 target is s3://bucket/prefix")
        return ArchiveUrl(ArchiveScheme.S3, parts.netloc, parts.path.strip("/"))
    raise ValueError(f"{url!r}: the archive is file:///dir or s3://bucket/prefix")


def archive_name(campaign_id: str) -> str:
    return f"campaign-{campaign_id}.ndjson.gz"


def ended_at(status: Status, finished_at: datetime | None, updated_at: datetime) -> datetime | None:
    """When a campaign ended: its finish, or its last change for one stored without a finish;
    None while it is not finished."""
    if status not in TERMINAL:
        return None
    return finished_at or updated_at


def is_due(ended: datetime | None, archived: bool, now: datetime, kept: timedelta) -> bool:
    """A finished campaign's records go once they are older than ``kept``, archived once."""
    return ended is not None and not archived and ended <= now - kept


def erased_line(line: dict[str, object]) -> dict[str, object]:
    """An archive line's erased placeholder: its outcome and error, nothing of the person (the
    line an archive written after the erasure holds in their place)."""
    return {"token": "", "erased": True, "outcome": line["outcome"], "error": line.get("error")}

