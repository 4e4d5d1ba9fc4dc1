"""Messages Herald puts on RabbitMQ. JSON on the wire, validated on the way in.

``CancelCampaign`` is a public contract: other teams publish it with their own tools to
``herald.cancel``. It is versioned and tolerant of fields it does not know, so a newer publisher
never breaks an older pod; anything it cannot act on is dead-lettered with a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from herald.domain.lanes import Route
from herald.domain.suppression import Rule
from herald.domain.types import MAX_TOKEN_CHARS, ObjectIdStr, PlainText, UserId

CANCEL_MESSAGE_MAX_BYTES = 64 * 1024
"""A message on ``herald.cancel`` larger than this is dropped by the pods (one log line): a
cancel needs a few hundred bytes, and every pod receives a copy of each."""


class CancelCampaign(BaseModel):
    """Command: stop campaign ``campaign_id`` everywhere (published to the fanout exchange).

    ``action`` says how: ``cancel`` (the default, what every version-1 publisher means) ends
    it; ``pause`` holds the rest back until a resume; ``resume`` is the api telling pods that a
    campaign was resumed (a resume is decided by the api alone, never by a message).

    ``decision_id`` is set only by Herald: the message tells pods of a decision already made
    (``herald/service_layer/stopping/``), and a pod acts only on the campaign's latest decision
    as stored, so a late or repeated broadcast changes nothing. A message without one (any AMQP
    tool) is a request, decided once by the first pod that sees it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    campaign_id: ObjectIdStr
    reason: PlainText | None = Field(default=None, max_length=500)
    requested_by: PlainText | None = Field(default=None, max_length=200)
    action: Literal["cancel", "pause", "resume"] = "cancel"
    decision_id: str | None = Field(default=None, max_length=64)
    replaces: str | None = Field(default=None, max_length=64)
    """The decision this one replaced (Herald's broadcasts only): a pod whose latest known
    decision is that one acts at once; any other reads the store first."""
    version: Literal[1] = 1


class DispatchCampaign(BaseModel):
    """Command: page the audience of ``campaign_id`` into chunks (a hint; MongoDB decides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: ObjectIdStr


class Profile(BaseModel):
    """What a translated or personalised campaign reads of a recipient's device, copied into
    its chunk by the dispatcher (a plain campaign's recipients carry none: its chunks stay as
    small as before). ``attributes`` holds only those the campaign's placeholders read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    platform: str | None = None
    locale: str | None = None
    timezone: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProfileNeed:
    """What of each device a campaign's messages read, so the dispatcher copies that and no
    more into its chunks: the platform, locale and timezone, and these ``attributes``."""

    attributes: frozenset[str] = frozenset()

    def profile(self, device: Mapping[str, Any]) -> Profile:
        """The profile of a device given as its stored fields."""
        attributes = device.get("attributes") or {}
        return Profile.model_construct(
            platform=device.get("platform"), locale=device.get("locale"),
            timezone=device.get("timezone"),
            attributes={name: attributes[name] for name in self.attributes if name in attributes})


@dataclass(frozen=True, slots=True)
class RecipientDevice:
    """A recipient as a placeholder sees it (``herald.domain.personalize.DeviceFields``)."""

    user_id: str | None
    locale: str | None
    timezone: str | None
    platform: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


class Recipient(BaseModel):
    """A recipient inside a chunk. Tokens were validated when the device registered; here only
    their size is checked, since a chunk carries hundreds of them on the sender's hot path.

    An erased person's recipients are replaced by :meth:`erased_placeholder` (no token, no user
    id, no profile, ``erased`` set): its position in the chunk, and so every count and every
    recorded outcome, stays as it was (``herald/service_layer/erasure.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(default="", max_length=MAX_TOKEN_CHARS)
    user_id: UserId | None = None
    profile: Profile | None = None
    erased: Literal[True] | None = None
    suppressed: Rule | None = None
    """Set by the dispatcher for a recipient a rule holds back before any send (quiet hours
    that skip, ``domain/quiet_hours.py``): the sender records it ``suppressed`` with that
    rule and sends it nothing."""

    @model_validator(mode="after")
    def _has_token(self) -> Recipient:
        if not self.token and not self.erased:
            raise ValueError("a recipient has a token, unless it was erased")
        return self

    @classmethod
    def erased_placeholder(cls) -> Recipient:
        """What takes an erased person's place in a chunk: nothing of theirs."""
        return cls.model_construct(token="", user_id=None, profile=None, erased=True)

    def device(self) -> RecipientDevice:
        """The recipient's fields for rendering; a recipient without a profile has only its
        user id (its placeholders' defaults apply, ``platform`` is empty)."""
        profile = self.profile
        if profile is None:
            return RecipientDevice(self.user_id, None, None, "")
        return RecipientDevice(self.user_id, profile.locale, profile.timezone,
                               profile.platform or "", profile.attributes)

    def stored(self) -> dict[str, Any]:
        """As a chunk document and a chunk message hold it: absent fields left out, so a
        plain campaign's recipients are exactly ``token`` and ``user_id``."""
        return self.model_dump(exclude_none=True)


class SendChunk(BaseModel):
    """Command: send campaign ``campaign_id`` to these recipients, chunk number ``seq``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: ObjectIdStr
    seq: int = Field(ge=0)
    recipients: list[Recipient] = Field(min_length=1, max_length=10_000)
    route: Route | None = None
    """The queue it waits in (``herald.domain.lanes.chunk_route``); None: ``standard``. A chunk
    handed back or offered again goes to the same queue."""

    @property
    def queue_route(self) -> Route:
        return self.route or Route.STANDARD
