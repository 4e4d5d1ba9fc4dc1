"""A frequency cap per person (issue 32, point 2; docs/sending-safely.md#frequency-cap).

``HERALD_MARKETING_CAP`` says how many marketing campaigns one person may receive within
rolling windows: ``3/24h``, or several windows that must all pass, ``1/1h,3/24h,10/7d``. A
person is the recipient's ``user_id``, else its device token; the cap counts *campaigns*, so a
campaign that reaches three devices of one person counts once for them (and reaches all three).
Transactional campaigns are neither capped nor counted. A campaign may opt out
(``frequency_cap: "none"``: still counted) or add a lower cap of its own (checked with the
setting's), both only for keys of ``HERALD_FREQUENCY_CAP_ROLES``.

The check is made by the sender, right before it sends a chunk, in one atomic Redis script per
chunk (``adapters/frequency_caps.py``): two campaigns sent at the same instant cannot both pass
the cap for one person. This module holds what that script decides as plain functions, which
the unit tests and the fake store use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from herald.domain.purpose import Purpose

NO_CAP = "none"
"""A campaign's ``frequency_cap`` that opts out of the cap (its sends are still counted)."""

MAX_WINDOW_S = 30 * 86_400
"""The longest window: a person's history is kept in Redis for the longest window in force."""
MAX_WINDOWS = 5

_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
_WINDOW = re.compile(r"(\d{1,6})/(\d{1,6})([smhd])")


class CapSpecInvalid(ValueError):
    """A frequency cap that cannot be read: says what the grammar is."""

    def __init__(self, spec: str, why: str) -> None:
        super().__init__(f"frequency cap {spec!r}: {why}; write windows as <count>/<duration>"
                         f" with a unit of s, m, h or d, comma-separated (e.g. 1/1h,3/24h)")
        self.spec = spec


@dataclass(frozen=True, slots=True, order=True)
class CapWindow:
    """At most ``limit`` campaigns to one person within any ``seconds``."""

    seconds: int
    limit: int

    def __str__(self) -> str:
        for unit in ("d", "h", "m"):
            if self.seconds % _UNITS[unit] == 0:
                return f"{self.limit}/{self.seconds // _UNITS[unit]}{unit}"
        return f"{self.limit}/{self.seconds}s"


@dataclass(frozen=True, slots=True)
class Cap:
    """One or more windows, shortest first; a send must pass every one."""

    windows: tuple[CapWindow, ...]

    def __str__(self) -> str:
        return ",".join(str(window) for window in self.windows)


def parse_cap(spec: str) -> Cap:
    """``1/1h,3/24h`` as a :class:`Cap`; ``CapSpecInvalid`` with the reason otherwise."""
    windows = [_window(spec, part.strip()) for part in spec.split(",")]
    if len({w.seconds for w in windows}) < len(windows):
        raise CapSpecInvalid(spec, "two windows of the same duration")
    if len(windows) > MAX_WINDOWS:
        raise CapSpecInvalid(spec, f"more than {MAX_WINDOWS} windows")
    return Cap(tuple(sorted(windows)))


def _window(spec: str, part: str) -> CapWindow:
    match = _WINDOW.fullmatch(part)
    if match is None:
        raise CapSpecInvalid(spec, f"{part!r} is not a window")
    window = CapWindow(int(match[2]) * _UNITS[match[3]], int(match[1]))
    if window.limit < 1 or window.seconds < 1:
        raise CapSpecInvalid(spec, f"{part} allows nothing; counts and durations start at 1 "
                                   "(a campaign opts out with \"none\")")
    if window.seconds > MAX_WINDOW_S:
        raise CapSpecInvalid(spec, f"{part} is longer than 30 days")
    return window


def setting_cap(setting: str | None) -> Cap | None:
    """``HERALD_MARKETING_CAP`` read: None when unset or empty."""
    return parse_cap(setting) if setting and setting.strip() else None


def normalized_choice(choice: str) -> str:
    """A campaign's ``frequency_cap`` as stored: ``none``, or its cap as written, without
    spaces (``CapSpecInvalid`` if it cannot be read)."""
    stripped = choice.strip()
    if stripped.lower() == NO_CAP:
        return NO_CAP
    parse_cap(stripped)
    return ",".join(part.strip() for part in stripped.split(","))


class CapNotApplicable(ValueError):
    """A campaign's own frequency cap where the cap never applies (only marketing is capped)."""

    def __init__(self, purpose: Purpose | None) -> None:
        kind = purpose.value if purpose is not None else "legacy (created before purposes)"
        super().__init__(f"frequency_cap: a {kind} campaign is never capped, only marketing "
                         "ones are; leave frequency_cap out")


def campaign_choice(choice: str | None, purpose: Purpose | None) -> str | None:
    """A campaign's ``frequency_cap`` as stored: None (the setting's), ``none``, or its cap
    as written. ``CapSpecInvalid``, or ``CapNotApplicable`` for a campaign that is
    not marketing."""
    if choice is None:
        return None
    if purpose is not Purpose.MARKETING:
        raise CapNotApplicable(purpose)
    return normalized_choice(choice)


def follow_up_choice(asked: str | None, original: str | None,
                     purpose: Purpose | None) -> str | None:
    """A follow-up's ``frequency_cap``: the one asked, else its original's while it stays
    marketing (a follow-up made transactional is not capped)."""
    if asked is not None:
        return campaign_choice(asked, purpose)
    return original if purpose is Purpose.MARKETING else None


@dataclass(frozen=True, slots=True)
class CapRule:
    """What the cap does with one campaign's sends: each person checked against ``windows``
    (none: not checked, only counted), and counted for ``retention_s``."""

    windows: tuple[CapWindow, ...]
    retention_s: int


def rule_for(purpose: Purpose | None, choice: str | None, setting: Cap | None) -> CapRule | None:
    """The cap a campaign's sends meet: None when they are neither checked nor counted
    (transactional, stored before purposes, or no cap in force at all).

    ``choice`` is the campaign's ``frequency_cap``: None, the setting's cap; ``none``, not
    checked (counted while the setting is set, so other campaigns see its sends); a cap,
    checked with the setting's windows, so it can only lower it."""
    if purpose is not Purpose.MARKETING:
        return None
    if choice == NO_CAP:
        return None if setting is None else CapRule((), _longest(setting.windows))
    windows = (setting.windows if setting else ()) + (parse_cap(choice).windows if choice else ())
    return CapRule(windows, _longest(windows)) if windows else None


def _longest(windows: Iterable[CapWindow]) -> int:
    return max(window.seconds for window in windows)


def person_of(user_id: str | None, token: str) -> str:
    """Whom the cap counts for: the user, else the device."""
    return f"u:{user_id}" if user_id else f"t:{token}"


def send_key(campaign_id: str, seq: int, position: int) -> str:
    """One recipient of one campaign in a person's history: exact to release, and the
    campaign it counts for is what precedes the first ``:``."""
    return f"{campaign_id}:{seq}:{position}"


def campaign_of(send: str) -> str:
    return send.split(":", 1)[0]


def admits(history: Iterable[tuple[str, float]], campaign_id: str,
           windows: Iterable[CapWindow], now_s: float) -> bool:
    """Whether a person whose kept ``history`` is ``(send key, at)`` may receive
    ``campaign_id`` at ``now_s``: yes if it already counts for them (another of their devices,
    or this very send before a crash), else if every window holds fewer campaigns than its
    limit. A send exactly a window old is out of that window."""
    kept = list(history)
    if any(campaign_of(send) == campaign_id for send, _ in kept):
        return True
    return all(len({campaign_of(send) for send, at in kept if at > now_s - window.seconds})
               < window.limit for window in windows)
