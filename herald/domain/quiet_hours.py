"""Quiet hours in the person's own time zone (issue 32, point 3; docs/sending-safely.md).

``HERALD_QUIET_HOURS`` (``21:00-08:00``; empty: off) is a window of wall-clock time. A marketing
recipient whose local time (the device's ``timezone``, else the campaign's, else UTC) is inside
it when the campaign reaches them is **held** until the window ends there and sent then, or,
for a campaign that says ``skip``, recorded ``suppressed`` with the rule ``quiet_hours``.
Transactional campaigns (and those stored before purposes) are never held.

Holding parks nothing: the dispatcher plans the audience as waves of timezones
(``plan_waves``, the local-time delivery's waves of ``herald/domain/timing.py``): the zones
outside the window are due at once, each zone inside it is due when the window ends there (a
``held`` wave), or is due at once with its recipients marked suppressed (a ``skipped`` wave).
A held wave is a later part of the campaign, paged when it is due; no sender or queue holds
anything meanwhile.

Daylight saving, read the way a person reads a wall clock (as ``timing.py`` does): the window
is a range of wall-clock times, so a window that ends in a skipped hour ends when the clocks
jump past it, and in a repeated hour a recipient is quiet whenever the wall clock shows a
quiet time (on the fall-back night, ``01:30-02:30`` in Paris holds twice).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from herald.domain.purpose import Purpose
from herald.domain.timing import Wave, local_to_utc

OFF = "off"
"""A campaign's ``quiet_hours`` that opts out of them."""
DEFAULT_ZONE = "UTC"
"""The zone of a device without one, for a campaign that names none."""

_WALL = r"([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?"
_WINDOW = re.compile(rf"{_WALL}\s*-\s*{_WALL}")


class QuietMode(StrEnum):
    """What quiet hours do with a recipient inside the window."""

    HOLD = "hold"
    """Sent when the window ends in their time zone (the default)."""
    SKIP = "skip"
    """Recorded ``suppressed`` (rule ``quiet_hours``), never sent."""


class QuietHoursInvalid(ValueError):
    """A quiet window that cannot be read: says what the grammar is."""

    def __init__(self, spec: str, why: str) -> None:
        super().__init__(f"quiet hours {spec!r}: {why}; write a window of wall-clock times as "
                         f"HH:MM-HH:MM (seconds allowed, HH:MM:SS), e.g. 21:00-08:00")
        self.spec = spec


class QuietHoursNotApplicable(ValueError):
    """A campaign's own quiet hours where they never apply (only marketing is held)."""

    def __init__(self, purpose: Purpose | None) -> None:
        kind = purpose.value if purpose is not None else "legacy (created before purposes)"
        super().__init__(f"quiet_hours: a {kind} campaign is never held by quiet hours, only "
                         "marketing ones are; leave quiet_hours out")


@dataclass(frozen=True, slots=True)
class QuietWindow:
    """Wall-clock times from ``start_s`` (included) to ``end_s`` (excluded), in seconds of the
    day; a window whose end comes before its start crosses midnight."""

    start_s: int
    end_s: int

    @property
    def crosses_midnight(self) -> bool:
        return self.end_s < self.start_s

    def contains(self, wall: time) -> bool:
        """Whether the wall-clock time ``wall`` is quiet."""
        second = wall.hour * 3_600 + wall.minute * 60 + wall.second
        if self.crosses_midnight:
            return second >= self.start_s or second < self.end_s
        return self.start_s <= second < self.end_s

    def __str__(self) -> str:
        return f"{_wall(self.start_s)}-{_wall(self.end_s)}"


def _wall(second: int) -> str:
    hours, rest = divmod(second, 3_600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def parse_window(spec: str) -> QuietWindow:
    """``21:00-08:00`` as a :class:`QuietWindow`; ``QuietHoursInvalid`` with the reason."""
    match = _WINDOW.fullmatch(spec.strip())
    if match is None:
        raise QuietHoursInvalid(spec, "not a window")
    h1, m1, s1, h2, m2, s2 = match.groups()
    window = QuietWindow(int(h1) * 3_600 + int(m1) * 60 + int(s1 or 0),
                         int(h2) * 3_600 + int(m2) * 60 + int(s2 or 0))
    if window.start_s == window.end_s:
        raise QuietHoursInvalid(spec, "it starts when it ends (to send at any hour, say off)")
    return window


def setting_window(setting: str | None) -> QuietWindow | None:
    """``HERALD_QUIET_HOURS`` read: None when unset, empty or ``off``."""
    if setting is None or not setting.strip() or setting.strip().lower() == OFF:
        return None
    return parse_window(setting)


@dataclass(frozen=True, slots=True)
class QuietHoursChoice:
    """A campaign's quiet hours as asked: ``window`` None (``HERALD_QUIET_HOURS``), ``off``,
    or a window of its own as written (normalized); the mode; the zone of its devices that
    have none (the campaign's ``timezone``; None: UTC)."""

    window: str | None = None
    mode: QuietMode = QuietMode.HOLD
    timezone: str | None = None

    @property
    def overrides(self) -> bool:
        """Whether it replaces the setting's window (one of its own, or off): that needs the
        ``quiet_hours`` permission; choosing the mode alone does not."""
        return self.window is not None


def campaign_choice(window: str | None, mode: QuietMode, timezone: str | None,
                    purpose: Purpose | None, *, asked: bool) -> QuietHoursChoice | None:
    """A campaign's quiet hours as stored (``asked``: the request named them). A window is
    normalized (``QuietHoursInvalid``); ``QuietHoursNotApplicable`` for quiet hours asked of
    a campaign that is not marketing. None: nothing to keep (not marketing, nothing asked)."""
    if purpose is not Purpose.MARKETING:
        if asked:
            raise QuietHoursNotApplicable(purpose)
        return None
    if window is not None and window.strip().lower() == OFF:
        window = OFF
    elif window is not None:
        window = str(parse_window(window))
    if window is None and mode is QuietMode.HOLD and timezone is None:
        return None
    return QuietHoursChoice(window, mode, timezone)


@dataclass(frozen=True, slots=True)
class QuietHours:
    """The quiet hours a campaign's recipients meet."""

    window: QuietWindow
    mode: QuietMode
    timezone: str
    """The zone of its devices that have none."""


def in_force(choice: QuietHoursChoice | None, purpose: Purpose | None,
             setting: QuietWindow | None) -> QuietHours | None:
    """The quiet hours a campaign of ``purpose`` meets (None: none): its own window, else the
    setting's, in its mode; none for a campaign that is not marketing or says ``off``."""
    if purpose is not Purpose.MARKETING:
        return None
    choice = choice or QuietHoursChoice()
    if choice.window == OFF:
        return None
    window = parse_window(choice.window) if choice.window else setting
    if window is None:
        return None
    return QuietHours(window, choice.mode, _known_zone(choice.timezone) or DEFAULT_ZONE)


def release_at(instant: datetime, zone: ZoneInfo, window: QuietWindow) -> datetime | None:
    """The first instant after ``instant`` at which the wall clock in ``zone`` is outside
    ``window``, if it is inside at ``instant``; None if it is outside."""
    local = instant.astimezone(zone)
    if not window.contains(local.time()):
        return None
    second = local.hour * 3_600 + local.minute * 60 + local.second
    day = local.date()
    if window.crosses_midnight and second >= window.start_s:
        day += timedelta(days=1)
    end = datetime.combine(day, time()) + timedelta(seconds=window.end_s)
    for fold in (0, 1):  # a repeated hour: the occurrence still ahead
        candidate = end.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if candidate > instant and candidate.astimezone(zone).replace(tzinfo=None) == end:
            return candidate
    return local_to_utc(end, zone)  # skipped by a spring-forward: when the clocks jumped


def _known_zone(name: str | None) -> str | None:
    return name if name is not None and _zone(name) is not None else None


def _zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def plan_waves(start: datetime, default_zone: str, device_zones: Iterable[str],
               quiet: QuietHours | None, wall: datetime | None = None) -> list[Wave]:
    """The waves of a campaign paged from ``start``: its zones grouped by when they are due,
    earliest first. With ``wall`` (local-time delivery) a zone is due when its clock shows
    ``wall``, else at ``start``; then quiet hours hold (or skip) a zone whose clock is inside
    the window when it would be sent. Devices with no timezone, or one unknown, go with
    ``default_zone`` (``others``)."""
    default = _known_zone(default_zone) or DEFAULT_ZONE
    by_key: dict[tuple[datetime, bool, bool], set[str]] = {}
    default_key = None
    for name in {*device_zones, default}:
        zone = _zone(name)
        if zone is None:
            continue  # unknown: its devices go with the campaign's timezone
        key = _due(start, zone, quiet, wall)
        by_key.setdefault(key, set()).add(name)
        if name == default:
            default_key = key
    return [Wave(at, tuple(sorted(zones)), others=key == default_key, held=held,
                 skipped=skipped)
            for key, zones in sorted(by_key.items()) for at, held, skipped in [key]]


def _due(start: datetime, zone: ZoneInfo, quiet: QuietHours | None,
         wall: datetime | None) -> tuple[datetime, bool, bool]:
    """When a zone is due, and whether quiet hours held or skipped it."""
    at = start if wall is None else local_to_utc(wall, zone)
    if quiet is None:
        return at, False, False
    released = release_at(max(at, start), zone, quiet.window)
    if released is None:
        return at, False, False
    if quiet.mode is QuietMode.SKIP:
        return at, False, True
    return released, True, False


def touches(waves: Iterable[Wave]) -> bool:
    """Whether quiet hours held or skipped any of ``waves``."""
    return any(wave.held or wave.skipped for wave in waves)


def held_until(waves: Iterable[Wave]) -> datetime | None:
    """When the last zone quiet hours hold is due (None: none is held)."""
    return max((wave.due_at for wave in waves if wave.held), default=None)


@dataclass(frozen=True, slots=True)
class QuietForecast:
    """What quiet hours do to an audience sent now: devices held and until when, skipped."""

    held: int = 0
    skipped: int = 0
    until: datetime | None = None


def wave_for(waves: Iterable[Wave], zone: str | None) -> Wave | None:
    """The wave a device of ``zone`` (None: no timezone) is paged in: its zone's, else the
    ``others`` wave, as the dispatcher's query (``Zones``)."""
    planned = list(waves)
    own = next((wave for wave in planned if zone is not None and zone in wave.zones), None)
    return own or next((wave for wave in planned if wave.others), None)


def forecast(waves: Iterable[Wave], devices_by_zone: Mapping[str | None, int]) -> QuietForecast:
    """The devices ``waves`` hold and skip, given the audience's devices by timezone (None:
    no timezone); a zone no wave lists goes with the ``others`` wave, as the dispatcher's."""
    planned = list(waves)
    held = skipped = 0
    until: datetime | None = None
    for zone, devices in devices_by_zone.items():
        wave = wave_for(planned, zone)
        if wave is not None and wave.held and devices:
            held += devices
            until = wave.due_at if until is None else max(until, wave.due_at)
        elif wave is not None and wave.skipped:
            skipped += devices
    return QuietForecast(held, skipped, until)

