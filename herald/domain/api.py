"""HTTP request and response bodies of the ``/v1`` API.

Requests forbid unknown fields: a misspelt option is an error, never silently ignored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from herald.domain.audience import Audience, Platform
from herald.domain.payload import DataMap, build_payload, check_payload_size
from herald.domain.status import Status
from herald.domain.timing import validate_cron
from herald.domain.types import (
    AttributeName,
    Locale,
    Scalar,
    TimezoneName,
    Token,
    Topic,
    UserId,
)

DEFAULT_CHUNK_SIZE = 500
MAX_BULK_DEVICES = 10_000


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- devices ---------------------------------------------------------------------------------------
class DeviceIn(Strict):
    token: Token
    user_id: UserId | None = None
    platform: Platform
    push_enabled: bool = True
    marketing_enabled: bool = False
    topics: list[Topic] = Field(default_factory=list, max_length=100)
    locale: Locale | None = None
    timezone: TimezoneName | None = None
    attributes: dict[AttributeName, Scalar] = Field(default_factory=dict, max_length=50)


class DeviceBulkIn(Strict):
    devices: list[DeviceIn] = Field(min_length=1, max_length=MAX_BULK_DEVICES)


class DeviceUpserted(BaseModel):
    token: str
    created: bool


class DeviceBulkResult(BaseModel):
    created: int
    updated: int


# --- campaigns -------------------------------------------------------------------------------------
class Content(Strict):
    """What the device shows, and the data the app acts on."""

    title: str = Field(min_length=1, max_length=1000)
    body: str = Field(min_length=1, max_length=4000)
    image_url: AnyHttpUrl | None = None
    data: DataMap = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fits_fcm(self) -> Content:
        check_payload_size(self.payload())
        return self

    def payload(self) -> dict[str, object]:
        image = str(self.image_url) if self.image_url else None
        return build_payload(self.title, self.body, self.data, image)


class CampaignTemplate(Content):
    """What a campaign sends, and to whom: a campaign's body, or each run of a schedule."""

    name: str | None = Field(default=None, max_length=200)
    audience: Audience = Field(default_factory=Audience)
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=1, le=5000)
    rate_per_s: int | None = Field(default=None, gt=0, le=1_000_000,
                                   description="Optional cap for this campaign alone")


class CampaignCreate(CampaignTemplate):
    send_at: datetime | None = Field(
        default=None, description="ISO 8601 with an offset, or local time with `timezone`; "
                                  "omitted: send now")
    timezone: TimezoneName | None = None
    deliver_in_local_time: bool = Field(
        default=False,
        description="Send at the wall-clock `send_at` (no offset) in each device's own timezone; "
                    "devices without one use `timezone`")

    @model_validator(mode="after")
    def _local_time_needs_a_wall_clock(self) -> CampaignCreate:
        if self.deliver_in_local_time and (self.send_at is None or self.send_at.tzinfo is not None
                                           or self.timezone is None):
            raise ValueError("deliver_in_local_time needs send_at as a local time without an "
                             "offset (e.g. 2026-12-01T09:00:00) and a timezone for devices "
                             "that have none")
        return self


class CampaignPatch(Strict):
    """Changes to a campaign that is still ``scheduled``; omitted fields stay as they are."""

    name: str | None = Field(default=None, max_length=200)
    title: str | None = Field(default=None, min_length=1, max_length=1000)
    body: str | None = Field(default=None, min_length=1, max_length=4000)
    image_url: AnyHttpUrl | None = None
    data: DataMap | None = None
    audience: Audience | None = None
    send_at: datetime | None = None
    timezone: TimezoneName | None = None


class ScheduleCreate(Strict):
    name: str | None = Field(default=None, max_length=200)
    template: CampaignTemplate
    cron: str = Field(description="Five-field cron, matched in `timezone`, e.g. '0 9 * * MON'")
    timezone: TimezoneName = Field(description="IANA timezone of the cron expression")
    misfire_grace_s: int | None = Field(
        default=None, ge=0, le=7 * 24 * 3600,
        description="A run found overdue by more than this is marked missed, not sent late")

    @model_validator(mode="after")
    def _valid_cron(self) -> ScheduleCreate:
        validate_cron(self.cron)
        return self


class SchedulePatch(Strict):
    name: str | None = Field(default=None, max_length=200)
    state: Literal["active", "paused"] | None = None
    template: CampaignTemplate | None = None
    cron: str | None = None
    timezone: TimezoneName | None = None
    misfire_grace_s: int | None = Field(default=None, ge=0, le=7 * 24 * 3600)

    @model_validator(mode="after")
    def _valid_cron(self) -> SchedulePatch:
        if self.cron is not None:
            validate_cron(self.cron)
        return self


class ScheduleRun(BaseModel):
    occurrence: datetime
    outcome: Literal["fired", "missed"]
    campaign_id: str | None
    reason: str | None
    recorded_at: datetime


class ScheduleView(BaseModel):
    id: str
    name: str | None
    state: Literal["active", "paused", "ended"]
    cron: str
    timezone: str
    template: dict[str, Any]
    misfire_grace_s: int
    next_run_at: datetime | None
    next_run_local: str | None
    runs: list[ScheduleRun]
    missed_total: int
    created_at: datetime
    updated_at: datetime


class SchedulePage(BaseModel):
    items: list[ScheduleView]
    next_cursor: str | None


class CampaignCreated(BaseModel):
    id: str
    status: Status


class Counts(BaseModel):
    targeted: int
    sent: int
    failed: int
    unsent: int


class CancelInfo(BaseModel):
    requested_at: datetime
    acknowledged_at: datetime | None
    reason: str | None
    requested_by: str | None


class CampaignView(BaseModel):
    id: str
    name: str | None
    status: Status
    title: str
    body: str
    image_url: str | None
    data: dict[str, str]
    audience: dict[str, Any] | None
    retarget: dict[str, Any] | None
    chunk_size: int
    counts: Counts
    created_at: datetime
    due_at: datetime | None
    fired_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel: CancelInfo | None
    schedule_id: str | None
    local_time: dict[str, Any] | None = Field(
        default=None, description="Per-device local-time delivery: the wall clock and default zone")
    waves: list[dict[str, Any]] | None = Field(
        default=None, description="Per-device local-time delivery: when each group of timezones is sent")
    error: str | None


class CancelResult(BaseModel):
    id: str
    status: Status
    counts: Counts
    cancel: CancelInfo | None


class CampaignPage(BaseModel):
    items: list[CampaignView]
    next_cursor: str | None


class CancelRequest(Strict):
    reason: str | None = Field(default=None, max_length=500)


class RetargetRequest(Strict):
    """Optional new content for the follow-up; what is omitted is copied from the original."""

    title: str | None = Field(default=None, min_length=1, max_length=1000)
    body: str | None = Field(default=None, min_length=1, max_length=4000)
    image_url: AnyHttpUrl | None = None
    data: DataMap | None = None
    name: str | None = Field(default=None, max_length=200)
    chunk_size: int | None = Field(default=None, ge=1, le=5000)


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody

