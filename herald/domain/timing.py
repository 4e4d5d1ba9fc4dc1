"""Instants from user input. Everything is stored in UTC; a timezone only interprets input.

The container's own timezone never matters: nothing here reads the local clock or ``TZ``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo


class AmbiguousTime(ValueError):
    pass


def to_utc(moment: datetime, timezone: str | None) -> datetime:
    """``moment`` as UTC: an aware time as is, a naive one read in the IANA ``timezone``.

    A naive time that does not exist in ``timezone`` (skipped by a spring-forward) moves forward
    by the gap, the instant a person means by it; a repeated one (fall-back) takes its first
    occurrence.
    """
    if moment.tzinfo is not None:
        if timezone is not None:
            raise AmbiguousTime("give either an offset in send_at or a timezone, not both")
        return moment.astimezone(UTC)
    if timezone is None:
        raise AmbiguousTime("send_at without an offset needs a timezone, e.g. 'Asia/Seoul'")
    # fold=0 (PEP 495) reads a skipped time with the offset before the gap, which lands after
    # it, and a repeated time as its first occurrence.
    return moment.replace(tzinfo=ZoneInfo(timezone), fold=0).astimezone(UTC)
