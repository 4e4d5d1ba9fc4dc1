"""Suppressed: the fourth outcome beside sent, failed and unsent (issue 32).

A rule of Herald's held the recipient back, on purpose: nothing was asked of FCM,
and nothing went wrong. It is counted apart (``sent + failed + unsent + suppressed =
targeted``), listed in the audit with its rule, and left out of a retarget unless the request
asks for it. Through the sender it travels as an outcome whose code names the rule
(``suppressed:frequency_cap``), so every place that reads outcomes sorts it with one test; in a
delivery document it is stored apart from the failures (``Delivery.suppressed``).
"""

from __future__ import annotations

from enum import StrEnum


class Rule(StrEnum):
    """Why a recipient was suppressed."""

    FREQUENCY_CAP = "frequency_cap"
    """The person had as many marketing pushes as ``HERALD_MARKETING_CAP`` allows
    (``domain/frequency_cap.py``)."""
    QUIET_HOURS = "quiet_hours"
    """The recipient's local time was inside the quiet window of a campaign that skips
    rather than holds (``domain/quiet_hours.py``)."""


_PREFIX = "suppressed:"


def suppressed_code(rule: Rule) -> str:
    """The outcome code of a recipient ``rule`` suppressed."""
    return f"{_PREFIX}{rule.value}"


def suppressed_by(code: str | None) -> Rule | None:
    """The rule an outcome code says suppressed its recipient; None for sent or failed."""
    if code is None or not code.startswith(_PREFIX):
        return None
    return Rule(code[len(_PREFIX):])


def is_suppressed(code: str | None) -> bool:
    return code is not None and code.startswith(_PREFIX)


def is_failure(code: str | None) -> bool:
    """Whether an outcome code is a failure (an error, not a suppression)."""
    return code is not None and not code.startswith(_PREFIX)
