"""Recurrence in a timezone, across daylight-saving transitions, whatever the process TZ is."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from herald.domain.timing import (
    InvalidCron,
    first_instant_anywhere,
    local_time_waves,
    next_occurrence,
    occurrences_until,
    validate_cron,
)

NEW_YORK = ZoneInfo("America/New_York")


@pytest.fixture(autouse=True)
def process_in_another_zone() -> Iterator[None]:
    """Every test here runs with the process in Australia/Lord_Howe (half-hour DST)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Australia/Lord_Howe"
    time.tzset()
    yield
    if saved is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = saved
    time.tzset()


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def runs(cron: str, zone: str, start: datetime, count: int) -> list[datetime]:
    found, current = [], start
    for _ in range(count):
        current = next_occurrence(cron, zone, current)
        found.append(current)
    return found


def test_weekly_in_seoul_is_nine_local_every_monday() -> None:
    mondays = runs("0 9 * * MON", "Asia/Seoul", utc(2026, 11, 20), 3)
    assert mondays == [utc(2026, 11, 23, 0), utc(2026, 11, 30, 0), utc(2026, 12, 7, 0)]


def test_a_run_in_the_skipped_hour_fires_once_at_the_next_valid_instant() -> None:
    daily = runs("30 2 * * *", "America/New_York", utc(2026, 3, 6, 12), 3)
    assert daily == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]
    assert daily[1].astimezone(NEW_YORK).strftime("%H:%M %Z") == "03:00 EDT"


def test_a_run_in_the_repeated_hour_fires_once_on_its_first_occurrence() -> None:
    daily = runs("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert daily == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    assert [d.astimezone(NEW_YORK).strftime("%H:%M") for d in daily] == ["01:30", "01:30"]


def test_local_time_stays_put_across_both_transitions() -> None:
    spring = runs("0 9 * * *", "America/New_York", utc(2026, 3, 7, 0), 2)
    autumn = runs("0 9 * * *", "America/New_York", utc(2026, 10, 31, 0), 2)
    assert [m.hour for m in spring] == [14, 13]  # 09:00 EST, then 09:00 EDT
    assert [e.hour for e in autumn] == [13, 14]  # 09:00 EDT, then 09:00 EST


def test_next_occurrence_is_strictly_after_the_given_instant() -> None:
    exactly = utc(2026, 11, 23, 0)
    assert next_occurrence("0 9 * * MON", "Asia/Seoul", exactly) == utc(2026, 11, 30, 0)


def test_occurrences_until_lists_every_due_one_in_order() -> None:
    first = utc(2026, 11, 21, 10, 0)
    due = occurrences_until("*/15 * * * *", "UTC", first, utc(2026, 11, 21, 11, 5))
    assert due == [utc(2026, 11, 21, 10, m) for m in (0, 15, 30, 45)] + [utc(2026, 11, 21, 11)]


@pytest.mark.parametrize("bad", ["", "* * * *", "61 * * * *", "0 9 * * FUNDAY", "* * * * * *"])
def test_invalid_cron_expressions_are_refused(bad: str) -> None:
    with pytest.raises(InvalidCron):
        validate_cron(bad)


def test_local_time_waves_group_zones_that_reach_the_wall_clock_together() -> None:
    wall = datetime(2026, 12, 1, 9, 0)
    waves = local_time_waves(wall, "Asia/Seoul", ["America/New_York", "Asia/Tokyo",
                                                  "Europe/Madrid", "Not/AZone"])
    assert [(w.due_at, w.zones, w.others) for w in waves] == [
        (utc(2026, 12, 1, 0), ("Asia/Seoul", "Asia/Tokyo"), True),
        (utc(2026, 12, 1, 8), ("Europe/Madrid",), False),
        (utc(2026, 12, 1, 14), ("America/New_York",), False),
    ]


def test_local_time_waves_follow_each_zones_daylight_saving() -> None:
    summer = local_time_waves(datetime(2026, 7, 1, 9, 0), "UTC", ["America/New_York"])
    winter = local_time_waves(datetime(2026, 12, 1, 9, 0), "UTC", ["America/New_York"])
    assert [w.due_at for w in summer] == [utc(2026, 7, 1, 9), utc(2026, 7, 1, 13)]
    assert [w.due_at for w in winter] == [utc(2026, 12, 1, 9), utc(2026, 12, 1, 14)]


def test_a_wall_clock_time_happens_first_in_kiribati() -> None:
    assert first_instant_anywhere(datetime(2026, 12, 1, 9, 0)) == utc(2026, 11, 30, 19)
