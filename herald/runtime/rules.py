"""The sending rules' settings read once at a process's start, or an exit naming what is wrong
(as for any setting: ``herald: invalid configuration``)."""

from __future__ import annotations

import sys

from herald.domain.frequency_cap import Cap, CapSpecInvalid, setting_cap
from herald.domain.quiet_hours import QuietHoursInvalid, QuietWindow, setting_window
from herald.settings import Settings


def quiet_window(settings: Settings) -> QuietWindow | None:
    """``HERALD_QUIET_HOURS`` read (None: off)."""
    try:
        return setting_window(settings.quiet_hours)
    except QuietHoursInvalid as exc:
        sys.exit(f"herald: invalid configuration\n  HERALD_QUIET_HOURS: {exc}")


def marketing_cap(settings: Settings) -> Cap | None:
    """``HERALD_MARKETING_CAP`` read (None: no cap)."""
    try:
        return setting_cap(settings.marketing_cap)
    except CapSpecInvalid as exc:
        sys.exit(f"herald: invalid configuration\n  HERALD_MARKETING_CAP: {exc}")
