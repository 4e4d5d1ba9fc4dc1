"""Messages Herald puts on RabbitMQ. JSON on the wire, validated on the way in.

``CancelCampaign`` is a public contract: other teams publish it with their own tools to
``herald.cancel``. It is versioned and tolerant of fields it does not know, so a newer publisher
never breaks an older pod; anything it cannot act on is dead-lettered with a log line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from herald.domain.types import ObjectIdStr, UserId


class CancelCampaign(BaseModel):
    """Command: stop campaign ``campaign_id`` everywhere (published to the fanout exchange).

    ``action`` says how: ``cancel`` (the default, what every version-1 publisher means) ends
    it; ``pause`` holds the rest back until a resume; ``resume`` is the api telling pods that a
    campaign was resumed (a pod only reads the campaign's status again: a resume is decided by
    the api alone, never by a message)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    campaign_id: ObjectIdStr
    reason: str | None = Field(default=None, max_length=500)
    requested_by: str | None = Field(default=None, max_length=200)
    action: Literal["cancel", "pause", "resume"] = "cancel"
    version: Literal[1] = 1


class DispatchCampaign(BaseModel):
    """Command: page the audience of ``campaign_id`` into chunks (a hint; MongoDB decides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: ObjectIdStr


class Recipient(BaseModel):
    """A recipient inside a chunk. Tokens were validated when the device registered; here only
    their size is checked, since a chunk carries hundreds of them on the sender's hot path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=1, max_length=4096)
    user_id: UserId | None = None


class SendChunk(BaseModel):
    """Command: send campaign ``campaign_id`` to these recipients, chunk number ``seq``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: ObjectIdStr
    seq: int = Field(ge=0)
    recipients: list[Recipient] = Field(min_length=1, max_length=10_000)
