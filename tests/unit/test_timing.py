"""``to_utc`` (herald/domain/timing.py): user input instants to UTC, whatever the process TZ."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from herald.domain.timing import AmbiguousTime, to_utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def assert_utc(value: datetime, expected: datetime) -> None:
    assert value == expected
    assert value.utcoffset() == timedelta(0)
    assert value.tzinfo is UTC


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 5, 1, 9, 0, tzinfo=timezone(timedelta(hours=9))), utc(2026, 5, 1, 0, 0)),
        (datetime(2026, 5, 1, 9, 0, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
         utc(2026, 5, 1, 14, 30)),
        (datetime(2026, 5, 1, 9, 0, tzinfo=UTC), utc(2026, 5, 1, 9, 0)),
        (datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))), utc(2025, 12, 31, 23, 30)),
        (datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin")), utc(2026, 7, 1, 10, 0)),
    ],
)
def test_aware_times_are_converted_to_utc(moment: datetime, expected: datetime) -> None:
    assert_utc(to_utc(moment, None), expected)


@pytest.mark.parametrize(
    ("moment", "zone", "expected"),
    [
        (datetime(2026, 5, 1, 9, 0), "Asia/Seoul", utc(2026, 5, 1, 0, 0)),
        (datetime(2026, 1, 15, 9, 0), "Asia/Seoul", utc(2026, 1, 15, 0, 0)),
        (datetime(2026, 1, 1, 3, 0), "Asia/Seoul", utc(2025, 12, 31, 18, 0)),
        (datetime(2026, 1, 15, 12, 0), "America/New_York", utc(2026, 1, 15, 17, 0)),
        (datetime(2026, 7, 15, 12, 0), "America/New_York", utc(2026, 7, 15, 16, 0)),
        (datetime(2026, 7, 15, 12, 0), "UTC", utc(2026, 7, 15, 12, 0)),
        (datetime(2026, 7, 15, 12, 0), "Asia/Kolkata", utc(2026, 7, 15, 6, 30)),
    ],
)
def test_naive_times_are_read_in_the_given_zone(moment: datetime, zone: str,
                                                expected: datetime) -> None:
    assert_utc(to_utc(moment, zone), expected)


def test_seoul_has_no_dst_so_it_is_always_nine_hours_ahead() -> None:
    for month in range(1, 13):
        local = datetime(2026, month, 10, 12, 0)
        assert to_utc(local, "Asia/Seoul") == local.replace(tzinfo=UTC) - timedelta(hours=9)


def test_naive_time_without_zone_is_rejected() -> None:
    with pytest.raises(AmbiguousTime, match="timezone"):
        to_utc(datetime(2026, 5, 1, 9, 0), None)


def test_aware_time_with_zone_is_rejected() -> None:
    with pytest.raises(AmbiguousTime, match="not both"):
        to_utc(datetime(2026, 5, 1, 9, 0, tzinfo=UTC), "Asia/Seoul")


def test_ambiguous_time_is_a_value_error() -> None:
    assert issubclass(AmbiguousTime, ValueError)


def test_skipped_spring_forward_time_means_the_next_valid_instant() -> None:
    # 2026-03-08 02:00 EST jumps to 03:00 EDT; 02:30 does not exist: the first instant after
    # the gap is 03:00 EDT (07:00 UTC), as cron implementations run jobs of the skipped hour.
    result = to_utc(datetime(2026, 3, 8, 2, 30), "America/New_York")
    assert_utc(result, utc(2026, 3, 8, 7, 0))
    assert result.astimezone(ZoneInfo("America/New_York")).replace(tzinfo=None) == datetime(
        2026, 3, 8, 3, 0)


def test_repeated_fall_back_time_takes_the_first_occurrence() -> None:
    # 2026-11-01 02:00 EDT falls back to 01:00 EST; 01:30 happens at 05:30 and 06:30 UTC.
    assert_utc(to_utc(datetime(2026, 11, 1, 1, 30), "America/New_York"), utc(2026, 11, 1, 5, 30))


def test_fold_of_the_input_does_not_choose_the_second_occurrence() -> None:
    second = datetime(2026, 11, 1, 1, 30, fold=1)
    assert_utc(to_utc(second, "America/New_York"), utc(2026, 11, 1, 5, 30))


def test_times_just_around_the_dst_gap_are_unaffected() -> None:
    assert_utc(to_utc(datetime(2026, 3, 8, 1, 59), "America/New_York"), utc(2026, 3, 8, 6, 59))
    assert_utc(to_utc(datetime(2026, 3, 8, 3, 0), "America/New_York"), utc(2026, 3, 8, 7, 0))


@pytest.fixture
def chatham_process_tz() -> Iterator[None]:
    """Run a test with the process in Pacific/Chatham (UTC+12:45/+13:45), then restore TZ."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Chatham"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.usefixtures("chatham_process_tz")
def test_results_do_not_depend_on_the_process_timezone() -> None:
    assert time.localtime(0).tm_gmtoff != 0  # the odd zone really is in effect
    assert_utc(to_utc(datetime(2026, 5, 1, 9, 0), "Asia/Seoul"), utc(2026, 5, 1, 0, 0))
    assert_utc(to_utc(datetime(2026, 3, 8, 2, 30), "America/New_York"), utc(2026, 3, 8, 7, 0))
    aware = datetime(2026, 5, 1, 9, 0, tzinfo=timezone(timedelta(hours=2)))
    assert_utc(to_utc(aware, None), utc(2026, 5, 1, 7, 0))
