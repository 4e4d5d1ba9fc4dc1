"""Quiet hours as pure functions (herald/domain/quiet_hours.py): the window's grammar, a window
across midnight, the end of a window on the days the clocks change (Europe/Paris springs
forward on the last Sunday of March, 02:00 → 03:00, and falls back on the last Sunday of
October, 03:00 → 02:00), the waves a campaign is planned in, and the forecast of them."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from herald.domain.purpose import Purpose
from herald.domain.quiet_hours import (
    OFF,
    QuietHours,
    QuietHoursChoice,
    QuietHoursInvalid,
    QuietHoursNotApplicable,
    QuietMode,
    QuietWindow,
    campaign_choice,
    forecast,
    held_until,
    in_force,
    parse_window,
    plan_waves,
    release_at,
    setting_window,
    touches,
)

PARIS = ZoneInfo("Europe/Paris")
NIGHT = parse_window("21:00-08:00")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def paris(*args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=PARIS, fold=fold).astimezone(UTC)  # type: ignore[misc]


def test_a_window_is_read_and_written_back() -> None:
    assert parse_window("21:00-08:00") == QuietWindow(21 * 3600, 8 * 3600)
    assert parse_window(" 01:30 - 03:00 ") == QuietWindow(5400, 10800)
    assert str(parse_window("22:15:30-06:00")) == "22:15:30-06:00"
    assert setting_window("") is None and setting_window(None) is None
    assert setting_window("off") is None and setting_window("21:00-08:00") == NIGHT


@pytest.mark.parametrize("spec", ["21-8", "24:00-08:00", "21:00", "21:00-21:00", "9:00-10:00",
                                  "21:60-08:00", "21:00-08:00,22:00-09:00", ""])
def test_a_window_that_cannot_be_read_says_why(spec: str) -> None:
    with pytest.raises(QuietHoursInvalid, match="HH:MM-HH:MM"):
        parse_window(spec)


@pytest.mark.parametrize(("wall", "quiet"), [
    (time(20, 59, 59), False), (time(21, 0), True), (time(23, 59, 59), True), (time(0, 0), True),
    (time(7, 59, 59), True), (time(8, 0), False), (time(12, 0), False)])
def test_a_window_across_midnight(wall: time, quiet: bool) -> None:
    assert NIGHT.contains(wall) is quiet


def test_a_window_within_a_day() -> None:
    lunch = parse_window("12:00-14:00")
    assert [lunch.contains(time(h)) for h in (11, 12, 13, 14)] == [False, True, True, False]


def test_a_recipient_in_the_evening_is_released_the_next_morning() -> None:
    seoul = ZoneInfo("Asia/Seoul")  # UTC+9, no DST
    at = datetime(2026, 11, 28, 23, 30, tzinfo=seoul).astimezone(UTC)
    assert release_at(at, seoul, NIGHT) == utc(2026, 11, 28, 23, 0)  # 08:00 on the 29th
    after_midnight = datetime(2026, 11, 29, 2, 0, tzinfo=seoul).astimezone(UTC)
    assert release_at(after_midnight, seoul, NIGHT) == utc(2026, 11, 28, 23, 0)
    assert release_at(utc(2026, 11, 29, 3, 0), seoul, NIGHT) is None  # 12:00 there


def test_spring_forward_a_window_of_01_30_to_03_00_ends_when_the_clocks_reach_03_00() -> None:
    window = parse_window("01:30-03:00")  # 29 March 2026: 02:00 CET is 03:00 CEST
    at = paris(2026, 3, 29, 1, 45)  # 00:45 UTC
    released = release_at(at, PARIS, window)
    assert released == utc(2026, 3, 29, 1, 0)  # 03:00 CEST: only 15 minutes later
    assert released is not None and released.astimezone(PARIS).time() == time(3, 0)


def test_spring_forward_a_window_ending_inside_the_skipped_hour_ends_at_the_jump() -> None:
    window = parse_window("01:00-02:30")  # 02:30 never happens on 29 March 2026 in Paris
    assert release_at(paris(2026, 3, 29, 1, 10), PARIS, window) == utc(2026, 3, 29, 1, 0)
    assert release_at(paris(2026, 3, 29, 3, 10), PARIS, window) is None


def test_fall_back_the_repeated_hour_is_quiet_both_times() -> None:
    window = parse_window("01:30-02:30")  # 25 October 2026: 03:00 CEST is 02:00 CET
    first = paris(2026, 10, 25, 2, 10)  # 00:10 UTC, CEST
    assert release_at(first, PARIS, window) == utc(2026, 10, 25, 0, 30)  # 02:30 CEST
    between = paris(2026, 10, 25, 2, 45)  # 00:45 UTC: 02:45 CEST, outside
    assert release_at(between, PARIS, window) is None
    second = paris(2026, 10, 25, 2, 10, fold=1)  # 01:10 UTC, CET: quiet again
    assert release_at(second, PARIS, window) == utc(2026, 10, 25, 1, 30)  # 02:30 CET


def test_fall_back_a_night_window_is_one_hour_longer_in_utc() -> None:
    evening = paris(2026, 10, 24, 21, 0)  # 19:00 UTC, CEST
    released = release_at(evening, PARIS, NIGHT)
    assert released == utc(2026, 10, 25, 7, 0)  # 08:00 CET
    assert released - evening == timedelta(hours=12)


def test_the_choice_is_normalized_and_only_for_marketing() -> None:
    marketing = Purpose.MARKETING
    assert campaign_choice(None, QuietMode.HOLD, None, marketing, asked=False) is None
    assert campaign_choice(" 22:00 - 07:00", QuietMode.SKIP, "Asia/Seoul", marketing,
                           asked=True) == QuietHoursChoice("22:00-07:00", QuietMode.SKIP,
                                                           "Asia/Seoul")
    assert campaign_choice("OFF", QuietMode.HOLD, None, marketing, asked=True) == \
        QuietHoursChoice(OFF)
    assert campaign_choice(None, QuietMode.HOLD, None, Purpose.TRANSACTIONAL,
                           asked=False) is None
    with pytest.raises(QuietHoursNotApplicable, match="transactional"):
        campaign_choice(None, QuietMode.SKIP, None, Purpose.TRANSACTIONAL, asked=True)
    with pytest.raises(QuietHoursInvalid):
        campaign_choice("late", QuietMode.HOLD, None, marketing, asked=True)
    assert QuietHoursChoice(OFF).overrides and QuietHoursChoice("22:00-07:00").overrides
    assert not QuietHoursChoice(None, QuietMode.SKIP).overrides


def test_the_quiet_hours_in_force() -> None:
    marketing = Purpose.MARKETING
    assert in_force(None, marketing, NIGHT) == QuietHours(NIGHT, QuietMode.HOLD, "UTC")
    assert in_force(None, marketing, None) is None
    assert in_force(QuietHoursChoice(OFF), marketing, NIGHT) is None
    own = QuietHoursChoice("12:00-14:00", QuietMode.SKIP, "Asia/Seoul")
    assert in_force(own, marketing, None) == QuietHours(parse_window("12:00-14:00"),
                                                        QuietMode.SKIP, "Asia/Seoul")
    assert in_force(None, Purpose.TRANSACTIONAL, NIGHT) is None
    assert in_force(None, None, NIGHT) is None  # stored before purposes


NOW = utc(2026, 11, 28, 12, 0)  # 21:00 in Seoul and Tokyo, 13:00 in Paris, 07:00 in New York


def test_waves_hold_the_zones_inside_the_window_until_it_ends_there() -> None:
    quiet = QuietHours(NIGHT, QuietMode.HOLD, "Europe/Paris")
    waves = plan_waves(NOW, "Europe/Paris",
                       ["Asia/Seoul", "Asia/Tokyo", "America/New_York", "Not/AZone"], quiet)
    assert [(w.due_at, w.zones, w.others, w.held) for w in waves] == [
        (NOW, ("Europe/Paris",), True, False),
        (utc(2026, 11, 28, 13, 0), ("America/New_York",), False, True),  # 08:00 there
        (utc(2026, 11, 28, 23, 0), ("Asia/Seoul", "Asia/Tokyo"), False, True)]
    assert touches(waves) and held_until(waves) == utc(2026, 11, 28, 23, 0)


def test_skip_waves_are_due_at_once_and_marked() -> None:
    quiet = QuietHours(NIGHT, QuietMode.SKIP, "UTC")
    waves = plan_waves(NOW, "UTC", ["Asia/Seoul", "Europe/Paris"], quiet)
    assert [(w.due_at, w.zones, w.others, w.skipped) for w in waves] == [
        (NOW, ("Europe/Paris", "UTC"), True, False), (NOW, ("Asia/Seoul",), False, True)]
    assert held_until(waves) is None


def test_without_quiet_hours_the_waves_are_those_of_local_time_delivery() -> None:
    wall = datetime(2026, 11, 29, 9, 0)
    waves = plan_waves(NOW, "Asia/Seoul", ["Asia/Tokyo", "Europe/Madrid"], None, wall)
    assert [(w.zones, w.others) for w in waves] == [(("Asia/Seoul", "Asia/Tokyo"), True),
                                                     (("Europe/Madrid",), False)]
    assert not touches(waves)
    assert plan_waves(NOW, "UTC", ["Asia/Seoul"], None) == [
        plan_waves(NOW, "UTC", ["Asia/Seoul"], None)[0]]


def test_local_time_delivery_at_a_quiet_hour_is_held_until_the_window_ends() -> None:
    wall = datetime(2026, 11, 29, 6, 0)  # 06:00 everywhere: inside 21:00-08:00
    quiet = QuietHours(NIGHT, QuietMode.HOLD, "Asia/Seoul")
    waves = plan_waves(NOW, "Asia/Seoul", ["Europe/Madrid"], quiet, wall)
    assert [(w.due_at, w.zones, w.held) for w in waves] == [
        (utc(2026, 11, 28, 23, 0), ("Asia/Seoul",), True),  # 08:00 in Seoul
        (utc(2026, 11, 29, 7, 0), ("Europe/Madrid",), True)]  # 08:00 in Madrid


def test_an_unknown_default_zone_is_utc() -> None:
    waves = plan_waves(NOW, "Nowhere/Land", [], None)
    assert [(w.zones, w.others) for w in waves] == [(("UTC",), True)]


def test_the_forecast_counts_the_devices_of_each_wave() -> None:
    quiet = QuietHours(NIGHT, QuietMode.HOLD, "Europe/Paris")
    waves = plan_waves(NOW, "Europe/Paris", ["Asia/Seoul", "America/New_York"], quiet)
    found = forecast(waves, {"Asia/Seoul": 30, "America/New_York": 5, "Europe/Paris": 7,
                             None: 11, "Not/AZone": 2})
    assert (found.held, found.skipped, found.until) == (35, 0, utc(2026, 11, 28, 23, 0))
    only_new_york = forecast(waves, {"America/New_York": 5, "Asia/Seoul": 0})
    assert only_new_york.until == utc(2026, 11, 28, 13, 0)
    skipping = plan_waves(NOW, "Asia/Seoul", ["Europe/Paris"],
                          QuietHours(NIGHT, QuietMode.SKIP, "Asia/Seoul"))
    found = forecast(skipping, {"Europe/Paris": 4, None: 6, "Not/AZone": 1})
    assert (found.held, found.skipped, found.until) == (0, 7, None)
