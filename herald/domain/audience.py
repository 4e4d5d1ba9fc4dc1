"""Who a campaign is for: the audience filter, and which devices it admits.

``Audience`` is what the device repository is asked with (``DeviceRepository.stream``,
``count``, ``timezones``), with ``Zones`` for one wave of local-time delivery. The MongoDB adapter
translates both into a query (``herald.adapters.devices``), building every operator itself from
validated scalars, so nothing a caller sends is ever passed through as a query fragment; the
unit tests' fakes evaluate them here (``Audience.admits``). The shared store contract holds the
two to the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from herald.domain.types import AttributeName, ConditionValue, Locale, Scalar, Topic, UserId

if TYPE_CHECKING:
    from herald.domain.documents import Device


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"
    WEB = "web"


MAX_CONDITION_VALUES = 1000
"""Values one audience compares attributes with, all its conditions together (``in`` lists)."""
MAX_AUDIENCE_USER_IDS = 2000
"""Users an audience names one by one: a list of people (a launch's testers, a support case's
users); a larger group is a topic or an attribute, which the app backend keeps up to date."""
MAX_AUDIENCE_TOPICS = 100
MAX_AUDIENCE_LOCALES = 100
MAX_AUDIENCE_ATTRIBUTES = 20


class AttributeFilter(BaseModel):
    """Condition on one free device attribute: equality, membership, or a range.

    A condition holds only for a value of the same type as its own (``True`` is not ``1``,
    ``"1"`` is not ``1``), and never for a device without the attribute.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    eq: ConditionValue | None = None
    in_: list[ConditionValue] | None = Field(default=None, alias="in", min_length=1,
                                             max_length=MAX_CONDITION_VALUES)
    gt: ConditionValue | None = None
    gte: ConditionValue | None = None
    lt: ConditionValue | None = None
    lte: ConditionValue | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> AttributeFilter:
        ranges = [v for v in (self.gt, self.gte, self.lt, self.lte) if v is not None]
        kinds = sum((self.eq is not None, self.in_ is not None, bool(ranges)))
        if kinds != 1:
            raise ValueError("an attribute filter needs exactly one of: eq, in, or a range")
        return self

    def bounds(self) -> dict[str, Scalar]:
        """The range's bounds by operator (``gt``, ``gte``, ``lt``, ``lte``), those given."""
        given = {"gt": self.gt, "gte": self.gte, "lt": self.lt, "lte": self.lte}
        return {op: value for op, value in given.items() if value is not None}

    def holds(self, value: object) -> bool:
        """Whether a device whose attribute is ``value`` (``MISSING``: it has none) passes."""
        if self.eq is not None:
            return _same(value, self.eq)
        if self.in_ is not None:
            return any(_same(value, wanted) for wanted in self.in_)
        return all(_bounded(value, op, bound) for op, bound in self.bounds().items())


class Audience(BaseModel):
    """Devices a campaign targets. Every field narrows the audience; ``None`` means no condition.

    Devices whose token FCM reported as unregistered or invalid are never part of an audience.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    push_enabled: bool | None = True
    marketing_enabled: bool | None = None
    platforms: list[Platform] | None = Field(default=None, min_length=1,
                                             max_length=len(Platform))
    topics: list[Topic] | None = Field(default=None, min_length=1, max_length=MAX_AUDIENCE_TOPICS)
    user_ids: list[UserId] | None = Field(default=None, min_length=1,
                                          max_length=MAX_AUDIENCE_USER_IDS)
    locales: list[Locale] | None = Field(default=None, min_length=1,
                                         max_length=MAX_AUDIENCE_LOCALES)
    attributes: dict[AttributeName, AttributeFilter] | None = Field(
        default=None, max_length=MAX_AUDIENCE_ATTRIBUTES)

    @model_validator(mode="after")
    def _values_bounded(self) -> Audience:
        values = sum(len(condition.in_ or ()) for condition in (self.attributes or {}).values())
        if values > MAX_CONDITION_VALUES:
            raise ValueError(f"attributes: the conditions list {values} values in all; an "
                             f"audience compares with at most {MAX_CONDITION_VALUES}")
        return self

    @property
    def names_devices(self) -> bool:
        """Whether a condition can single out devices: a user, an attribute, or a topic (an
        app may subscribe each device to a topic of its own user's). A count under such a
        condition tells whether one device has a field (its locale, an attribute's value),
        so only those who may read devices may ask it."""
        return bool(self.user_ids or self.attributes or self.topics)

    def memberships(self) -> dict[str, list[str] | None]:
        """The device field each list condition is on, and the values it admits."""
        return {"platform": _strings(self.platforms), "topics": _strings(self.topics),
                "user_id": _strings(self.user_ids), "locale": _strings(self.locales)}

    def admits(self, device: Device) -> bool:
        """Whether ``device`` belongs to this audience."""
        return (not device.invalid
                and self.push_enabled in (None, device.push_enabled)
                and self.marketing_enabled in (None, device.marketing_enabled)
                and all(_member(getattr(device, field), values)
                        for field, values in self.memberships().items() if values is not None)
                and all(condition.holds(device.attributes.get(name, MISSING))
                        for name, condition in (self.attributes or {}).items()))


@dataclass(frozen=True, slots=True)
class Zones:
    """The devices of one wave of local-time delivery, by timezone: those in ``zones``, and
    with ``others`` also those with no timezone or one not in ``listed`` (every zone some wave
    was planned for)."""

    zones: tuple[str, ...]
    others: bool = False
    listed: tuple[str, ...] = ()

    def admits(self, timezone: str | None) -> bool:
        return timezone in self.zones or (self.others and timezone not in self.listed)


MISSING: Any = object()
"""The value of an attribute a device does not have."""


def _strings(values: list[Any] | None) -> list[str] | None:
    return None if values is None else [str(value) for value in values]


def _member(value: object, wanted: list[str]) -> bool:
    """A list field (``topics``) is a member if one of its elements is."""
    if isinstance(value, list | tuple):
        return any(element in wanted for element in value)
    return value in wanted


def _kind(value: object) -> str:
    """An attribute's comparison type: a condition never matches a value of another type."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _same(value: object, wanted: object) -> bool:
    return value is not MISSING and _kind(value) == _kind(wanted) and value == wanted


def _bounded(value: object, op: str, bound: Any) -> bool:
    if value is MISSING or _kind(value) != _kind(bound):
        return False
    compare: Any = value
    if op == "gt":
        return bool(compare > bound)
    if op == "gte":
        return bool(compare >= bound)
    if op == "lt":
        return bool(compare < bound)
    return bool(compare <= bound)
