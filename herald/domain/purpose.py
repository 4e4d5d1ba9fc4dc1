"""Purpose: why a campaign is sent, and so which devices it may reach (docs/sending-safely.md).

A ``marketing`` campaign (the default for new campaigns) reaches only devices that opted in to
marketing (``marketing_enabled: true``) and have push enabled, whatever its audience says. A
``transactional`` one (an order shipped, a password changed) ignores the marketing opt-in but
never reaches a device with push disabled. A campaign stored before purposes existed has none
(``None``, shown as ``purpose: null``): it keeps reaching what its audience says.

``reach`` is the one place a purpose narrows an audience: paging, counts, estimates, approval
counts and local-time waves all ask the device store with the audience it returns.
"""

from __future__ import annotations

from enum import StrEnum

from herald.domain.audience import Audience


class Purpose(StrEnum):
    MARKETING = "marketing"
    TRANSACTIONAL = "transactional"


DEFAULT_PURPOSE = Purpose.MARKETING
"""The purpose of a campaign, schedule template or estimate that names none."""


class PurposeConflict(ValueError):
    """An audience that the purpose leaves empty: a clear error rather than an empty send."""

    def __init__(self, field: str, purpose: Purpose) -> None:
        super().__init__(f"audience.{field}: a {purpose.value} campaign never reaches devices "
                         f"with {field} false; this audience would reach nobody")
        self.field = field
        self.purpose = purpose


_REQUIRED: dict[Purpose, dict[str, bool]] = {
    Purpose.MARKETING: {"push_enabled": True, "marketing_enabled": True},
    Purpose.TRANSACTIONAL: {"push_enabled": True},
}
"""The device flags each purpose requires, whatever the audience says of them."""


def purpose_conflict(audience: Audience, purpose: Purpose | None) -> PurposeConflict | None:
    """Why ``audience`` reaches nobody under ``purpose`` (it asks for a flag to be false that
    the purpose requires true), or None."""
    if purpose is None:
        return None
    for field in _REQUIRED[purpose]:
        if getattr(audience, field) is False:
            return PurposeConflict(field, purpose)
    return None


def reach(audience: Audience, purpose: Purpose | None) -> Audience:
    """The devices a campaign of ``purpose`` to ``audience`` may reach: ``audience`` with the
    flags the purpose requires (``None``, a legacy campaign: ``audience`` unchanged). Raises
    ``PurposeConflict`` for an audience the purpose leaves empty."""
    if purpose is None:
        return audience
    conflict = purpose_conflict(audience, purpose)
    if conflict is not None:
        raise conflict
    return audience.model_copy(update=_REQUIRED[purpose])


class HoldBack(StrEnum):
    """A rule that keeps a device of the audience from a campaign (issue 32's forecast)."""

    MARKETING_OPT_OUT = "marketing_opt_out"
    """Push enabled, not opted in to marketing: a marketing campaign never reaches it."""
    FREQUENCY_CAP = "frequency_cap"
    """Its person had as many marketing pushes as the cap allows: recorded suppressed."""
    QUIET_HOURS_HELD = "quiet_hours_held"
    """Its local time is inside the quiet window: sent when the window ends there."""
    QUIET_HOURS_SKIPPED = "quiet_hours_skipped"
    """Its local time is inside the quiet window of a campaign that skips: suppressed."""


def looser(purpose: Purpose | None) -> tuple[HoldBack, Purpose] | None:
    """The rule ``purpose`` adds to the one below it, and that purpose: the devices the rule
    holds back are those the looser purpose reaches and ``purpose`` does not (None: no rule)."""
    return (HoldBack.MARKETING_OPT_OUT, Purpose.TRANSACTIONAL) if purpose is Purpose.MARKETING \
        else None


class PurposeNarrows(ValueError):
    """A follow-up whose purpose requires a device flag its original's recipients were not
    chosen by: it would reach devices its purpose excludes (its recipients are the original's,
    never re-checked against the flags)."""

    def __init__(self, purpose: Purpose, flags: frozenset[str]) -> None:
        super().__init__(f"purpose: a {purpose.value} follow-up needs recipients chosen with "
                         f"{' and '.join(sorted(flags))} true, and its original's were not; "
                         f"send a new campaign instead")
        self.purpose = purpose


def required_flags(purpose: Purpose | None) -> frozenset[str]:
    """The device flags that must be true for a campaign of ``purpose`` to reach a device."""
    return frozenset() if purpose is None else frozenset(_REQUIRED[purpose])


def follow_up_purpose(asked: Purpose | None, original: Purpose | None,
                      original_reach: Audience | None) -> Purpose | None:
    """A follow-up's purpose: the one asked, else its original's. ``PurposeNarrows`` if it
    requires a flag the original's recipients were not chosen by (``original_reach``: the
    devices the original could reach; None for a follow-up, chosen by its own purpose)."""
    purpose = asked or original
    chosen_by = (required_flags(original) if original_reach is None else
                 frozenset(f for f in ("push_enabled", "marketing_enabled")
                           if getattr(original_reach, f) is True))
    missing = required_flags(purpose) - chosen_by
    if purpose is not None and missing:
        raise PurposeNarrows(purpose, missing)
    return purpose
