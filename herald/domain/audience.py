"""Who a campaign is for: the audience filter and its translation into a MongoDB query.

The translation is the only place where user input becomes a query, so it builds every operator
itself from validated scalars; nothing a caller sends is ever passed through as a query fragment.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from herald.domain.types import AttributeName, Locale, Scalar, Topic, UserId


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"
    WEB = "web"


class AttributeFilter(BaseModel):
    """Condition on one free device attribute: equality, membership, or a range."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    eq: Scalar | None = None
    in_: list[Scalar] | None = Field(default=None, alias="in", min_length=1, max_length=1000)
    gt: Scalar | None = None
    gte: Scalar | None = None
    lt: Scalar | None = None
    lte: Scalar | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> AttributeFilter:
        ranges = [v for v in (self.gt, self.gte, self.lt, self.lte) if v is not None]
        kinds = sum((self.eq is not None, self.in_ is not None, bool(ranges)))
        if kinds != 1:
            raise ValueError("an attribute filter needs exactly one of: eq, in, or a range")
        return self

    def to_condition(self) -> Any:
        if self.eq is not None:
            return self.eq
        if self.in_ is not None:
            return {"$in": list(self.in_)}
        bounds = {"gt": self.gt, "gte": self.gte, "lt": self.lt, "lte": self.lte}
        return {f"${op}": value for op, value in bounds.items() if value is not None}


class Audience(BaseModel):
    """Devices a campaign targets. Every field narrows the audience; ``None`` means no condition.

    Devices whose token FCM reported as unregistered or invalid are never part of an audience.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    push_enabled: bool | None = True
    marketing_enabled: bool | None = None
    platforms: list[Platform] | None = Field(default=None, min_length=1)
    topics: list[Topic] | None = Field(default=None, min_length=1, max_length=100)
    user_ids: list[UserId] | None = Field(default=None, min_length=1, max_length=10_000)
    locales: list[Locale] | None = Field(default=None, min_length=1, max_length=100)
    attributes: dict[AttributeName, AttributeFilter] | None = Field(default=None, max_length=20)


def audience_query(audience: Audience) -> dict[str, Any]:
    """MongoDB filter selecting the devices of ``audience``."""
    query: dict[str, Any] = {"invalid": False}
    if audience.push_enabled is not None:
        query["push_enabled"] = audience.push_enabled
    if audience.marketing_enabled is not None:
        query["marketing_enabled"] = audience.marketing_enabled
    memberships = {
        "platform": audience.platforms,
        "topics": audience.topics,
        "user_id": audience.user_ids,
        "locale": audience.locales,
    }
    for field, values in memberships.items():
        if values is not None:
            query[field] = {"$in": [str(v) for v in values]}
    for name, condition in (audience.attributes or {}).items():
        query[f"attributes.{name}"] = condition.to_condition()
    return query
