"""Instants from user input, and recurrence. Everything is stored in UTC; a timezone only
interprets input (a local ``send_at``) and recurrence (``0 9 * * MON`` in ``Asia/Seoul``).

The container's own timezone never matters: nothing here reads the local clock or ``TZ``.

Daylight saving, the way a person reads a wall clock (and the way cron implementations do):
- a local time that does not exist (skipped by a spring-forward) means the first instant after
  the gap: 02:30 on the spring-forward day in New York is 03:00 EDT;
- a local time that happens twice (fall-back) means its first occurrence, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

MAX_OCCURRENCES_SCANNED = 100_000


class AmbiguousTime(ValueError):
    pass


class InvalidCron(ValueError):
    pass


def to_utc(moment: datetime, timezone: str | None) -> datetime:
    """``moment`` as UTC: an aware time as is, a naive one read in the IANA ``timezone``."""
    if moment.tzinfo is not None:
        if timezone is not None:
            raise AmbiguousTime("give either an offset in send_at or a timezone, not both")
        return moment.astimezone(UTC)
    if timezone is None:
        raise AmbiguousTime("send_at without an offset needs a timezone, e.g. 'Asia/Seoul'")
    return local_to_utc(moment, ZoneInfo(timezone))


def local_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of wall-clock time ``wall`` (naive) in ``zone``, per the DST rules above."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # exists; fold=0 is the first of two occurrences when it repeats
    return _end_of_gap(wall.replace(tzinfo=zone, fold=1).astimezone(UTC), first, zone)


def _end_of_gap(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clocks jumped, between two instants on either side of it (bisection)."""
    offset_before = before.astimezone(zone).utcoffset()
    while after - before > timedelta(seconds=1):
        middle = before + (after - before) / 2
        if middle.astimezone(zone).utcoffset() == offset_before:
            before = middle
        else:
            after = middle
    return after.replace(microsecond=0)


CRON_PROBE_FROM = datetime(2000, 1, 1)
"""Where ``validate_cron`` looks for a first occurrence (any fixed instant would do: a five-field
expression that ever matches matches every few years)."""


def validate_cron(expression: str) -> str:
    """A five-field cron expression (minute hour day-of-month month day-of-week) that matches
    some day: ``0 0 30 2 *`` (February 30th) is as invalid as ``every monday``."""
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise InvalidCron(f"{expression!r} is not a five-field cron expression, e.g. '0 9 * * MON'")
    try:
        croniter(expression, CRON_PROBE_FROM).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidCron(f"{expression!r} never happens (no such day)") from None
    return expression


def next_occurrence(expression: str, timezone: str, after: datetime) -> datetime:
    """The first occurrence of ``expression`` in ``timezone`` strictly after ``after`` (UTC).

    Cron fields are matched against local wall-clock times, each matching wall time once.
    """
    zone = ZoneInfo(timezone)
    wall = after.astimezone(zone).replace(tzinfo=None)
    matches = croniter(expression, wall)
    for _ in range(MAX_OCCURRENCES_SCANNED):
        try:
            candidate = local_to_utc(matches.get_next(datetime), zone)
        except CroniterBadDateError:
            break
        if candidate > after:
            return candidate
    raise InvalidCron(f"{expression!r} has no occurrence after {after.isoformat()}")


def occurrences_until(expression: str, timezone: str, first: datetime, now: datetime,
                      limit: int = 1000) -> list[datetime]:
    """Occurrences from ``first`` (itself an occurrence) up to ``now``, at most ``limit``."""
    found: list[datetime] = []
    current = first
    while current <= now and len(found) < limit:
        found.append(current)
        current = next_occurrence(expression, timezone, current)
    return found


EARLIEST_ZONE = "Etc/GMT-14"
"""UTC+14 (Kiribati): where any wall-clock time comes first."""


@dataclass(frozen=True)
class Wave:
    """Devices whose local wall-clock time reaches the campaign's ``send_at`` at ``due_at``.

    ``others`` marks the wave of the campaign's own timezone, which also takes every device
    with no timezone, or one that was unknown when the waves were planned.

    Quiet hours (``herald/domain/quiet_hours.py``) make waves too: ``held`` marks the zones
    whose local time was inside the quiet window, due when it ends there; ``skipped`` those
    whose recipients are recorded ``suppressed`` (rule ``quiet_hours``) instead of sent.
    """

    due_at: datetime
    zones: tuple[str, ...]
    others: bool = False
    held: bool = False
    skipped: bool = False


def first_instant_anywhere(wall: datetime) -> datetime:
    """The first instant at which wall-clock time ``wall`` happens somewhere on Earth."""
    return local_to_utc(wall, ZoneInfo(EARLIEST_ZONE))


def local_time_waves(wall: datetime, default_zone: str, device_zones: Iterable[str]) -> list[Wave]:
    """Group device timezones by the instant ``wall`` happens in each, earliest first."""
    by_instant: dict[datetime, set[str]] = {}
    for zone in {*device_zones, default_zone}:
        try:
            instant = local_to_utc(wall, ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError):
            continue  # unknown zone: its devices go with the campaign's timezone
        by_instant.setdefault(instant, set()).add(zone)
    default_instant = local_to_utc(wall, ZoneInfo(default_zone))
    return [Wave(instant, tuple(sorted(zones)), others=instant == default_instant)
            for instant, zones in sorted(by_instant.items())]
