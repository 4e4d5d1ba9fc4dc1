"""HTTP request and response bodies of the ``/v1`` API: a public contract (``herald.contracts``).

Requests forbid unknown fields: a misspelt option is an error, never silently ignored.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationInfo,
    field_validator,
    model_validator,
)

from herald.domain.access import OWNER_PATTERN, ActorKind, LogOutcome, Role
from herald.domain.audience import Audience, Platform
from herald.domain.frequency_cap import campaign_choice, normalized_choice
from herald.domain.lanes import Lane
from herald.domain.locales import LanguageTag
from herald.domain.payload import (
    LONGEST_DEFAULT_KEY,
    SIZED_NOW_S,
    DataMap,
    ReplaceKey,
    SendOptions,
    build_payload,
    check_payload_size,
)
from herald.domain.personalize import TemplateRefused
from herald.domain.purpose import DEFAULT_PURPOSE, HoldBack, Purpose, purpose_conflict
from herald.domain.quiet_hours import (
    OFF,
    QuietHoursInvalid,
    QuietHoursNotApplicable,
    QuietMode,
    parse_window,
)
from herald.domain.rendering import (
    MAX_BODY_CHARS,
    MAX_TITLE_CHARS,
    MAX_TRANSLATIONS,
    Translation,
    Translations,
    content_problems,
)
from herald.domain.status import Status
from herald.domain.timing import validate_cron
from herald.domain.types import (
    AttributeName,
    Locale,
    ObjectIdStr,
    PlainText,
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


# --- access ----------------------------------------------------------------------------------------
class ActorView(BaseModel):
    """Who made a change: a key (``api_key``), a cancel message (``amqp``) or Herald itself."""

    id: str
    name: str
    kind: ActorKind
    verified: bool
    owner: str | None = Field(
        default=None, description="The person the key belongs to (none: recorded before keys "
                                  "had owners, or not a key)")


class ApiKeyCreate(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")
    role: Role
    expires_at: AwareDatetime | None = Field(default=None, description="Never, when omitted")
    owner: str | None = Field(
        default=None, pattern=OWNER_PATTERN,
        description="The person the key is for (a login or e-mail address): the keys of one "
                    "person are one person for approval. Omitted: the minting key's owner")


class ApiKeyView(BaseModel):
    id: str
    prefix: str = Field(description="The key's non-secret beginning, to recognise it")
    name: str
    role: Role
    owner: str = Field(description="The person it belongs to (a key minted before owners "
                                   "existed: its own id)")
    created_at: datetime
    created_by: ActorView | None
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked_by: ActorView | None


class ApiKeyCreated(ApiKeyView):
    secret: str = Field(description="The whole key, shown this once: Authorization: Bearer <secret>")


class ApiKeyPage(BaseModel):
    items: list[ApiKeyView]
    next_cursor: str | None


class Me(BaseModel):
    id: str
    name: str
    role: Role
    owner: str = Field(description="The person the key belongs to")
    scopes: list[str]
    expires_at: datetime | None
    lanes: list[Lane] = Field(
        default_factory=list, description="The lanes this key may send in (`urgent` only for "
                                          "the roles of HERALD_URGENT_ROLES); none without "
                                          "the campaigns:send scope")
    purposes: list[Purpose] = Field(
        default_factory=list, description="The purposes this key may send with "
                                          "(`transactional` only for the roles of "
                                          "HERALD_TRANSACTIONAL_ROLES); none without the "
                                          "campaigns:send scope")
    frequency_cap: bool = Field(
        default=False, description="Whether this key may give a campaign its own "
                                   "`frequency_cap` (`none` or a lower cap): the roles of "
                                   "HERALD_FREQUENCY_CAP_ROLES with the campaigns:send scope")
    quiet_hours: bool = Field(
        default=False, description="Whether this key may give a campaign quiet hours of its "
                                   "own (a window, or `off`): the roles of "
                                   "HERALD_QUIET_HOURS_ROLES with the campaigns:send scope")


class LogEntryView(BaseModel):
    id: str
    at: datetime
    actor: ActorView | None
    action: str
    outcome: LogOutcome
    status_code: int
    target_kind: str | None
    target_id: str | None
    campaign_id: str | None
    address: str | None
    on_behalf_of: str | None
    detail: str | None
    count: int = Field(description="How many calls this entry stands for: refusals (403, other "
                                   "4xx) of one key, action and status within one minute are one "
                                   "entry, with the first call's target, address and detail")


class OperatorLogPage(BaseModel):
    items: list[LogEntryView]
    next_cursor: str | None


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


class ImportProblem(BaseModel):
    line: int = Field(description="The line's number, 1-based, as an editor shows it")
    code: Literal["invalid_device", "line_too_long"]
    message: str = Field(description="What is wrong: the first field that does not validate")


class DeviceImportResult(BaseModel):
    """What ``POST /v1/devices/import`` did, line by line (lines applied in order: a token's
    later line compares with its earlier one)."""

    lines: int = Field(description="Non-blank lines read: inserted + updated + unchanged + invalid")
    inserted: int = Field(description="Lines of a token the registry did not have")
    updated: int = Field(description="Lines that changed a known device")
    unchanged: int = Field(description="Lines of a known device with exactly these fields "
                                       "(nothing written)")
    invalid: int = Field(description="Lines refused; the first 1,000 are listed in `problems`")
    problems: list[ImportProblem]
    problems_omitted: int = Field(description="Invalid lines counted but not listed")


class UserErased(BaseModel):
    """What ``DELETE /v1/users/{user_id}`` changed, in numbers (zeros: nothing was left)."""

    devices: int = Field(description="Devices removed")
    chunk_recipients: int = Field(description=(
        "Recipients of campaigns replaced by a placeholder without their data (still counted)"))
    test_send_outcomes: int = Field(description="Test-send outcomes whose device was blanked")
    archives_pending: bool = Field(description=(
        "Campaigns archived before now may list the person: their archive files are rewritten "
        "without them within HERALD_RETENTION_INTERVAL_S (false: no campaign is archived)"))


# --- campaigns -------------------------------------------------------------------------------------
class Content(Strict):
    """What the device shows, and the data the app acts on."""

    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)
    body: str = Field(min_length=1, max_length=MAX_BODY_CHARS)
    image_url: HttpUrl | None = None
    data: DataMap = Field(default_factory=dict)
    options: SendOptions | None = Field(
        default=None, description="Delivery and display per platform: TTL, priority, Android "
                                  "channel, sound, iOS badge, what a tap opens, analytics label")
    translations: Translations = Field(
        default_factory=dict,
        description="The words in other languages, by language tag (BCP 47: 'es', 'pt-BR'): a "
                    "device gets the most specific tag its locale matches (es-MX, then es), "
                    "else this content. Titles, bodies and data values may hold placeholders "
                    "such as {{ attributes.first_name | default(\"there\") }} (docs/content.md)")

    @model_validator(mode="after")
    def _fits_fcm(self) -> Content:
        key = self._sized_key()
        check_payload_size(self.payload(key))
        problems = content_problems(
            self.title, self.body, self.data, self.translations,
            image_url=str(self.image_url) if self.image_url else None, options=self.options,
            replace_key=key)
        if problems:
            raise TemplateRefused(problems)
        return self

    def _sized_key(self) -> str:
        """The key the size rule counts: with none named, the longest Herald derives."""
        return LONGEST_DEFAULT_KEY

    def payload(self, replace_key: str) -> dict[str, object]:
        """The FCM message fields this content sends with ``replace_key`` (all but the token)."""
        image = str(self.image_url) if self.image_url else None
        return build_payload(self.title, self.body, self.data, image, replace_key=replace_key,
                             options=self.options, now_s=SIZED_NOW_S)


class KeyedContent(Content):
    """Content that will be sent with a known key (e.g. an amend, with its original's key),
    checked against FCM's size limit with exactly that key."""

    replace_key: ReplaceKey

    def _sized_key(self) -> str:
        return self.replace_key


LANE = ("Which campaigns go first when several send at once: `urgent` (an outage notice, a "
        "security alert: before everything, with a share of FCM's rate kept for it; needs the "
        "`urgent` permission), `standard` (the default), `bulk` (what the others leave)")


PURPOSE = ("Why it is sent: `marketing` (the default) reaches only devices with "
           "`marketing_enabled` true, whatever the audience says; `transactional` ignores "
           "`marketing_enabled` but never reaches devices with `push_enabled` false (needs the "
           "`transactional` permission)")


FREQUENCY_CAP = ("Omitted: the person cap of HERALD_MARKETING_CAP. `none`: not capped (its sends "
                 "still count towards the cap); a cap such as `1/24h` or `1/1h,2/7d`: checked "
                 "together with HERALD_MARKETING_CAP, so it can only lower it. Marketing "
                 "campaigns only; needs the `frequency_cap` permission (roles of "
                 "HERALD_FREQUENCY_CAP_ROLES)")


QUIET_HOURS = ("Omitted: HERALD_QUIET_HOURS, held. `hold` or `skip`: the setting's window, "
               "recipients inside it held until it ends in their timezone, or recorded "
               "suppressed (rule quiet_hours); `off`: none; `{\"window\": \"22:00-07:00\", "
               "\"mode\": \"skip\"}`: a window of its own (mode omitted: hold). Wall-clock "
               "times in each device's timezone, else the campaign's `timezone`, else UTC. "
               "Marketing campaigns only; `off` and a window of its own need the `quiet_hours` "
               "permission (roles of HERALD_QUIET_HOURS_ROLES)")


class QuietHoursIn(Strict):
    """Quiet hours of a campaign's own."""

    window: str | None = Field(default=None, max_length=40,
                               description="HH:MM-HH:MM (seconds allowed), e.g. 21:00-08:00; "
                                           "`off`: none; omitted: HERALD_QUIET_HOURS'")
    mode: QuietMode = Field(default=QuietMode.HOLD,
                            description="`hold`: sent when the window ends in the recipient's "
                                        "timezone; `skip`: recorded suppressed, never sent")

    @field_validator("window")
    @classmethod
    def _readable_window(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() == OFF:
            return None if value is None else OFF
        try:
            return str(parse_window(value))
        except QuietHoursInvalid as exc:
            raise ValueError(str(exc)) from None


QuietHoursAsked = QuietHoursIn | Literal["off", "hold", "skip"] | None


def quiet_hours_asked(asked: QuietHoursAsked) -> tuple[str | None, QuietMode]:
    """A request's ``quiet_hours`` as (window: None for the setting's, or ``off``; mode)."""
    if isinstance(asked, QuietHoursIn):
        return asked.window, asked.mode
    if asked == OFF:
        return OFF, QuietMode.HOLD
    return None, QuietMode(asked) if asked else QuietMode.HOLD


def overrides_quiet_hours(asked: QuietHoursAsked) -> bool:
    """Whether a request's ``quiet_hours`` replaces the setting's window (its own, or off)."""
    return quiet_hours_asked(asked)[0] is not None


LEGACY_TEMPLATE = "legacy_template"
"""Validation context: a schedule's template stored before purposes existed (no conflict)."""


def refuse_purpose_conflict(audience: Audience, purpose: Purpose | None) -> None:
    """A 422 naming the audience's field for an audience the purpose leaves empty."""
    conflict = purpose_conflict(audience, purpose)
    if conflict is not None:
        raise ValueError(str(conflict))


class CampaignTemplate(Content):
    """What a campaign sends, and to whom: a campaign's body, or each run of a schedule."""

    name: str | None = Field(default=None, max_length=200)
    audience: Audience = Field(default_factory=Audience)
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=1, le=5000)
    rate_per_s: int | None = Field(default=None, gt=0, le=1_000_000,
                                   description="Optional cap for this campaign alone")
    lane: Lane = Field(default=Lane.STANDARD, description=LANE)
    purpose: Purpose = Field(default=DEFAULT_PURPOSE, description=PURPOSE)
    frequency_cap: str | None = Field(default=None, max_length=100, description=FREQUENCY_CAP)
    quiet_hours: QuietHoursAsked = Field(default=None, description=QUIET_HOURS)

    @model_validator(mode="after")
    def _purpose_reaches_someone(self, info: ValidationInfo) -> CampaignTemplate:
        if not (info.context or {}).get(LEGACY_TEMPLATE):
            refuse_purpose_conflict(self.audience, self.purpose)
        self.frequency_cap = campaign_choice(self.frequency_cap, self.purpose)
        if self.quiet_hours is not None and self.purpose is not Purpose.MARKETING:
            raise ValueError(str(QuietHoursNotApplicable(self.purpose)))
        return self


MAX_WAVES = 20
MAX_HOLD_S = 7 * 24 * 3600


class RolloutWaveIn(Strict):
    percent: float = Field(gt=0, le=100, description="Cumulative share of the audience reached "
                                                     "once this wave is sent")
    hold_s: float = Field(default=0, ge=0, le=MAX_HOLD_S,
                          description="Seconds to hold after the wave, the gate watching")


class HaltWhenIn(Strict):
    failure_rate_above: float = Field(ge=0, lt=1, description="Pause the campaign when the "
                                      "failure rate (dead tokens left out) is above this share")
    min_attempts: int = Field(default=50, ge=1, le=1_000_000_000,
                              description="Attempts (dead tokens left out) before the gate judges")


class RolloutIn(Strict):
    """A staged rollout: wave k reaches a cumulative ``percent`` of the audience (a stable
    uniform sample), then holds ``hold_s`` while the gate watches (docs/sending-safely.md)."""

    waves: list[RolloutWaveIn] = Field(min_length=1, max_length=MAX_WAVES)
    halt_when: HaltWhenIn | None = None

    @model_validator(mode="after")
    def _cumulative_to_100(self) -> RolloutIn:
        percents = [wave.percent for wave in self.waves]
        if any(later <= earlier for earlier, later in itertools.pairwise(percents)):
            raise ValueError(f"rollout.waves: percents must increase strictly (cumulative "
                             f"shares of the audience), got {percents}")
        if percents[-1] != 100:
            raise ValueError(f"rollout.waves: the last wave must reach 100 percent, got "
                             f"{percents[-1]:g}")
        return self


class CampaignCreate(CampaignTemplate):
    replace_key: ReplaceKey | None = Field(
        default=None,
        description="Messages with the same key replace each other on a device (Android tag and "
                    "collapse_key, APNs apns-collapse-id, web push tag and Topic); 1 to 64 ASCII "
                    "letters, digits, '_', '-', '.' or ':'. Omitted: 'herald-<campaign id>'")
    send_at: datetime | None = Field(
        default=None, description="ISO 8601 with an offset, or local time with `timezone`; "
                                  "omitted: send now")
    timezone: TimezoneName | None = None
    deliver_in_local_time: bool = Field(
        default=False,
        description="Send at the wall-clock `send_at` (no offset) in each device's own timezone; "
                    "devices without one use `timezone`")
    rollout: RolloutIn | None = Field(
        default=None, description="Send in waves that hold, and halt (pause) on failures")

    @model_validator(mode="after")
    def _local_time_needs_a_wall_clock(self) -> CampaignCreate:
        if self.deliver_in_local_time and (self.send_at is None or self.send_at.tzinfo is not None
                                           or self.timezone is None):
            raise ValueError("deliver_in_local_time needs send_at as a local time without an "
                             "offset (e.g. 2026-12-01T09:00:00) and a timezone for devices "
                             "that have none")
        return self

    def _sized_key(self) -> str:
        return self.replace_key or LONGEST_DEFAULT_KEY


class CampaignPatch(Strict):
    """Changes to a campaign that is still ``scheduled``; omitted fields stay as they are.
    ``rate_per_s`` alone may also change while it sends (``pending``, ``in_progress``,
    ``paused``): every sender follows the new rate within a second."""

    rate_per_s: int | None = Field(default=None, gt=0, le=1_000_000,
                                   description="The campaign's own rate cap")
    name: str | None = Field(default=None, max_length=200)
    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    body: str | None = Field(default=None, min_length=1, max_length=MAX_BODY_CHARS)
    image_url: HttpUrl | None = None
    data: DataMap | None = None
    options: SendOptions | None = None
    translations: Translations | None = None
    audience: Audience | None = None
    send_at: datetime | None = None
    timezone: TimezoneName | None = None


MAX_CRON_CHARS = 120
"""Five fields, each a list of ranges and steps: longer than any schedule a person writes."""


class ScheduleCreate(Strict):
    name: str | None = Field(default=None, max_length=200)
    template: CampaignTemplate
    cron: str = Field(max_length=MAX_CRON_CHARS,
                      description="Five-field cron, matched in `timezone`, e.g. '0 9 * * MON'")
    timezone: TimezoneName = Field(description="IANA timezone of the cron expression")
    misfire_grace_s: int | None = Field(
        default=None, ge=0, le=7 * 24 * 3600,
        description="A run found overdue by more than this is marked missed, not sent late")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        """A field validator, so that the 422 names ``cron`` (``0 0 30 2 *`` never happens)."""
        return validate_cron(value)


class SchedulePatch(Strict):
    name: str | None = Field(default=None, max_length=200)
    state: Literal["active", "paused"] | None = None
    template: CampaignTemplate | None = None
    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    timezone: TimezoneName | None = None
    misfire_grace_s: int | None = Field(default=None, ge=0, le=7 * 24 * 3600)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return None if value is None else validate_cron(value)


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
    created_by: ActorView | None = None
    updated_by: ActorView | None = None
    template_authors: list[ActorView] = Field(
        default_factory=list, description="Who replaced its template: like its creator, none "
                                          "of their persons may approve its runs")


class SchedulePage(BaseModel):
    items: list[ScheduleView]
    next_cursor: str | None


class AudienceEstimateRequest(Strict):
    audience: Audience = Field(default_factory=Audience)
    languages: list[LanguageTag] = Field(
        default_factory=list, max_length=MAX_TRANSLATIONS,
        description="The tags of a campaign's translations: the answer then splits the devices "
                    "by the variant each would get (by_language)")
    rate_per_s: int | None = Field(default=None, gt=0, le=1_000_000,
                                   description="The campaign's own cap, for `finishes_in_s`")
    lane: Lane = Field(default=Lane.STANDARD, description="The campaign's lane, for "
                                                          "`finishes_in_s`")
    rollout: RolloutIn | None = Field(default=None, description="The campaign's staged "
                                                                "rollout, for `finishes_in_s`")
    purpose: Purpose = Field(default=DEFAULT_PURPOSE, description="The campaign's purpose: "
                             "the devices counted are those it may reach. " + PURPOSE)
    quiet_hours: QuietHoursAsked = Field(default=None, description="The campaign's quiet "
                                         "hours, for `held_back` and `finishes_in_s`. " +
                                         QUIET_HOURS)
    timezone: TimezoneName | None = Field(default=None, description="The campaign's "
                                          "timezone: quiet hours read devices without one "
                                          "in it (omitted: UTC)")
    frequency_cap: str | None = Field(default=None, max_length=100, description="The "
                                      "campaign's own frequency cap, for `held_back`. " +
                                      FREQUENCY_CAP)

    @model_validator(mode="after")
    def _purpose_reaches_someone(self) -> AudienceEstimateRequest:
        refuse_purpose_conflict(self.audience, self.purpose)
        self.frequency_cap = campaign_choice(self.frequency_cap, self.purpose)
        if self.quiet_hours is not None and self.purpose is not Purpose.MARKETING:
            raise ValueError(str(QuietHoursNotApplicable(self.purpose)))
        return self


FINISHES_IN_S = ("Expected seconds from now to the last recipient: the campaign's recipients at "
                 "the fleet's measured rate, shared with the running campaigns of its lane and "
                 "the lanes before it (what they still have to send), under its cap, with its "
                 "rollout's holds; null when nothing would send it (no sender alive, or no "
                 "share left for its lane). A forecast, not a promise: see docs/http-api.md")


class ForecastFields(BaseModel):
    """What a forecast rests on (docs/http-api.md, "When will it be done")."""

    fleet_rate_per_s: float = Field(
        default=0.0, description="What the fleet sends in a second, as the forecast assumes: "
                                 "measured per live sender, else HERALD_FORECAST_SENDER_RATE_PER_S "
                                 "per sender, at most the project's FCM rate")
    fleet_rate_measured: bool = Field(
        default=False, description="The fleet's rate was measured (false: the default per sender)")
    recipients_ahead: int = Field(
        default=0, description="What the running campaigns of its lane and the lanes before it "
                               "still have to send")


class AudienceEstimate(ForecastFields):
    devices: int = Field(description="Devices the audience selects now (a campaign created now "
                                     "targets these, plus any registered before it is paged)")
    finishes_in_s: float | None = Field(default=None, description=FINISHES_IN_S)
    by_language: dict[str, int] | None = Field(
        default=None, description="With `languages`: the devices by the translation their "
                                  "locale selects (its tag), `default` for the campaign's own "
                                  "content; null without `languages`")
    held_back: dict[HoldBack, int] = Field(
        default_factory=dict, description="Devices the audience selects that a rule keeps from "
                                          "the campaign, by rule, for a marketing campaign "
                                          "(none for a transactional one): "
                                          "`marketing_opt_out` (push enabled, not opted in to "
                                          "marketing; not among `devices`); among `devices`: "
                                          "`frequency_cap` (their person had as many marketing "
                                          "pushes as the cap allows, judged now: it moves with "
                                          "other sends), `quiet_hours_held` (local time inside "
                                          "the quiet window now: sent when it ends there, see "
                                          "`quiet_hours_until`), `quiet_hours_skipped` (inside "
                                          "the window of a campaign that skips: suppressed)")
    quiet_hours_until: datetime | None = Field(
        default=None, description="When the last device quiet hours hold is reached (the "
                                  "window ends in its timezone); null: none is held. "
                                  "`finishes_in_s` is never earlier")


# --- preview ---------------------------------------------------------------------------------------
class PreviewContent(Content):
    """A campaign's content as a create would give it, for a preview."""

    replace_key: ReplaceKey | None = Field(
        default=None, description="Omitted: herald-000000000000000000000000 stands for the "
                                  "key a new campaign's id gives")

    def _sized_key(self) -> str:
        return self.replace_key or LONGEST_DEFAULT_KEY


class PreviewRequest(Strict):
    """What to preview (``content``, or the campaign ``campaign_id``) for which device (its
    ``token``, or the newest device of ``user_id``): one of each."""

    content: PreviewContent | None = None
    campaign_id: ObjectIdStr | None = None
    token: Token | None = None
    user_id: UserId | None = None

    @model_validator(mode="after")
    def _one_of_each(self) -> PreviewRequest:
        if (self.content is None) == (self.campaign_id is None):
            raise ValueError("give either content or campaign_id")
        if (self.token is None) == (self.user_id is None):
            raise ValueError("give either token or user_id")
        return self


class PreviewDevice(BaseModel):
    token: str
    user_id: str | None
    platform: str
    locale: str | None
    timezone: str | None


class Preview(BaseModel):
    """The FCM message the device would get, exactly as a sender would send it; nothing sent."""

    device: PreviewDevice
    variant: str = Field(description="The translation its locale selects (its tag), or "
                                     "`default`: the campaign's own content")
    message: dict[str, Any] | None = Field(
        description="The FCM v1 `message` of the request body (token, notification, data, "
                    "every platform's options and replacement key); null if it cannot be sent")
    size_bytes: int | None = Field(
        description="Its size as FCM's 4,096-byte rule counts it (all but the token)")
    failure: str | None = Field(default=None,
                                description="Why this device's message would fail, if it would")
    failure_code: str | None = Field(
        default=None, description="The audit's error for it: MESSAGE_TOO_BIG or RENDER_FAILED")


AFFECTED_LANGUAGES = ("A follow-up (retarget, amend): the original's recipients it reaches, by "
                      "the variant of the original they got (or, unsent, would have got): a "
                      "translation's tag, or `default`")


class CampaignCreated(BaseModel):
    id: str
    status: Status
    languages: dict[str, int] | None = Field(default=None, description=AFFECTED_LANGUAGES)


class Counts(BaseModel):
    """``targeted = sent + failed + unsent + suppressed``."""

    targeted: int
    sent: int
    failed: int
    unsent: int
    suppressed: int = Field(
        default=0, description="Held back by a rule at send time and never sent (the "
                               "frequency cap); listed in the audit with the rule")
    maybe_delivered: int = Field(
        default=0, description="Of the failed, those FCM did not answer in time (TIMEOUT): the "
                               "message may have been delivered. Final counts only")


class ApprovalView(BaseModel):
    """A second key's approval of a large campaign, bound to the ``digest`` of what it covers."""

    digest: str = Field(description="SHA-256 of the content, audience and options approved")
    by: ActorView
    at: datetime
    rate_per_s: int | None = Field(
        default=None, description="The rate cap approved (null: uncapped); a lower one keeps "
                                  "the approval, a higher one needs a new approval")
    not_before: datetime | None = Field(
        default=None, description="The earliest time approved; a later one keeps the approval, "
                                  "an earlier one needs a new approval")
    revoked_at: datetime | None = Field(
        default=None, description="When an edit of what it covered revoked it")
    revoked_by: ActorView | None = None


class ApproveRequest(Strict):
    digest: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="The `content_digest` the approver read (required): refused (409 "
                    "approval_stale) if the campaign changed since")


class TestSendRequest(Strict):
    """The devices to send the campaign's exact message to: ``tokens`` or ``user_ids`` (every
    registered device of each), at most 100 devices in all."""

    __test__ = False  # not a pytest test class

    tokens: list[Token] | None = Field(default=None, min_length=1, max_length=100)
    user_ids: list[UserId] | None = Field(default=None, min_length=1, max_length=100)

    @model_validator(mode="after")
    def _one_of(self) -> TestSendRequest:
        if (self.tokens is None) == (self.user_ids is None):
            raise ValueError("give either tokens or user_ids")
        named = self.tokens or self.user_ids or []
        if len(set(named)) != len(named):
            raise ValueError("each device (token or user id) at most once per test send")
        return self


class TestOutcomeView(BaseModel):
    __test__ = False  # not a pytest test class

    device_id: str
    token_suffix: str = Field(description="The token's last 8 characters")
    user_id: str | None
    accepted: bool = Field(description="FCM accepted the message for this device")
    error: str | None = Field(description="FCM's error code (e.g. UNREGISTERED) if not")
    message: str | None = Field(default=None, description="Google's error message, if any")
    erased: bool = Field(default=False, description=(
        "The device's person was erased since: its id, token suffix and user id are blank"))


class TestSendView(BaseModel):
    """A test send as recorded (``test_sends``): never in the campaign's counts or audit."""

    __test__ = False  # not a pytest test class

    id: str
    campaign_id: str
    at: datetime
    by: ActorView
    status: Status = Field(description="The campaign's status when it was sent")
    accepted: int
    failed: int
    outcomes: list[TestOutcomeView]


class TestSendPage(BaseModel):
    __test__ = False  # not a pytest test class

    items: list[TestSendView]


class CancelInfo(BaseModel):
    requested_at: datetime
    acknowledged_at: datetime | None
    reason: str | None
    requested_by: ActorView | None
    on_behalf_of: str | None = Field(
        default=None, description="What the caller said about itself (X-Requested-By)")


class PauseInfo(BaseModel):
    """The campaign's latest pause. ``settled_at`` is set once every pod stopped: from then on
    nothing of the campaign is in flight, and ``counts`` are exact."""

    kind: Literal["manual", "gate"] = Field(description="Who paused it: an operator (or an "
                                                        "AMQP tool), or the rollout's gate")
    reason: str | None
    requested_at: datetime
    requested_by: ActorView | None
    settled_at: datetime | None
    counts: Counts | None = Field(description="Exact counts when it settled")
    resumed_at: datetime | None = None
    resumed_by: ActorView | None = None


class WaveFigures(BaseModel):
    wave: int = Field(description="1-based")
    failed: int
    attempted: int
    failure_rate: float


class GateView(BaseModel):
    failed: int = Field(description="Recipients recorded failed so far, dead tokens left out "
                                    "(since `judged_since`, when an operator resumed a halt)")
    attempted: int = Field(description="Recipients recorded so far, dead tokens left out")
    failure_rate: float
    failure_rate_above: float | None
    min_attempts: int | None
    judged_since: datetime | None = Field(
        default=None, description="Set when a resume overrode a halt: the gate judges only "
                                  "what was recorded since (the waves after the override)")
    waves: list[WaveFigures] = Field(default_factory=list,
                                     description="Each wave's own figures, once it is sent")


class RolloutView(BaseModel):
    """A staged rollout as it goes: the waves asked for, the one being sent or held (1-based),
    when its hold ends, and the gate's figures as last checked."""

    waves: list[RolloutWaveIn]
    wave: int = Field(description="The wave being sent or held, 1-based")
    holding: bool = Field(description="The wave is sent and held until `hold_until`")
    hold_until: datetime | None
    gate: GateView
    checked_at: datetime | None


class Eta(ForecastFields):
    """When a sending campaign's last recipient is expected (the estimate's forecast, with
    what it has still to send)."""

    finishes_in_s: float | None = Field(description=FINISHES_IN_S)
    finishes_at: datetime | None = Field(description="The same, as an instant")


class ArchiveView(BaseModel):
    """Where a finished campaign's per-recipient records are: a gzip NDJSON file, one line per
    recipient (the audit's fields), and the SHA-256 of the file as stored."""

    at: datetime
    location: str = Field(description="file:///dir/campaign-<id>.ndjson.gz or "
                                      "s3://bucket/prefix/campaign-<id>.ndjson.gz")
    sha256: str
    lines: int
    bytes: int
    purged_at: datetime | None = Field(
        description="When its chunks and deliveries were deleted (null: not yet)")


class VariantView(BaseModel):
    sent: int
    failed: int
    unsent: int
    suppressed: int = 0


class CampaignView(BaseModel):
    id: str
    name: str | None
    status: Status
    title: str
    body: str
    image_url: str | None
    data: dict[str, str]
    options: SendOptions | None = None
    translations: dict[str, Translation] = Field(default_factory=dict)
    audience: dict[str, Any] | None
    retarget: dict[str, Any] | None
    chunk_size: int
    counts: Counts
    created_at: datetime
    due_at: datetime | None
    fired_at: datetime | None
    started_at: datetime | None
    first_request_at: datetime | None = Field(
        default=None, description="When the campaign's first FCM request started")
    finished_at: datetime | None
    cancel: CancelInfo | None
    pause: PauseInfo | None = Field(default=None, description="The latest pause, if any")
    rollout: RolloutView | None = Field(default=None, description="Its staged rollout, if any")
    rate_per_s: int | None = Field(default=None, description="The campaign's own rate cap")
    lane: Lane = Field(default=Lane.STANDARD, description=LANE)
    purpose: Purpose | None = Field(
        default=None, description=PURPOSE + "; null: created before purposes existed, it "
                                            "reaches what its audience says")
    frequency_cap: str | None = Field(
        default=None, description="Its own frequency cap: null, HERALD_MARKETING_CAP's (if "
                                  "set); `none`, not capped; else a cap checked with it")
    quiet_hours: dict[str, Any] | None = Field(
        default=None, description="Its quiet hours as asked: `window` (null: "
                                  "HERALD_QUIET_HOURS'; `off`: none), `mode` (hold, skip), "
                                  "`timezone` (of devices without one; null: UTC); null: "
                                  "the setting's, held, in UTC (a marketing campaign), or "
                                  "none (any other)")
    quiet_hours_until: datetime | None = Field(
        default=None, description="When the last timezone quiet hours hold is due (the "
                                  "window ends there): its last recipient is reached then, "
                                  "not before; null: quiet hours hold none of its recipients "
                                  "(known once its dispatcher planned it)")
    eta: Eta | None = Field(
        default=None, description="While it sends (pending, in_progress), in GET "
                                  "/v1/campaigns/{id}: when its last recipient is expected")
    schedule_id: str | None
    local_time: dict[str, Any] | None = Field(
        default=None, description="Per-device local-time delivery: the wall clock and default zone")
    waves: list[dict[str, Any]] | None = Field(
        default=None, description="Per-device local-time delivery: when each group of timezones is sent")
    error: str | None
    created_by: ActorView | None = None
    edited_by: ActorView | None = None
    replace_key: str | None = Field(
        default=None, description="The key every message of the campaign carries (Android tag "
                                  "and collapse_key, APNs apns-collapse-id, web push tag and "
                                  "Topic): a later message with the same key replaces it")
    amends: str | None = Field(
        default=None, description="The campaign whose notification this one replaces (an amend)")
    amended_by: list[str] = Field(
        default_factory=list, description="The amends of this campaign, oldest first")
    approval_required: bool = Field(
        default=False, description="It reaches at least HERALD_APPROVAL_MIN_AUDIENCE devices: "
                                   "it sends only once another key approves it")
    audience_estimate: int | None = Field(
        default=None, description="Devices its audience selected when created or last edited "
                                  "(counted only when approvals are configured)")
    content_digest: str = Field(
        default="", description="SHA-256 of what an approval covers (content, audience, "
                                "options, rate cap, rollout): what an approver sends back")
    editors: list[ActorView] = Field(
        default_factory=list,
        description="Who changed what an approval covers since its last approval (for a "
                    "schedule's run, also who wrote its template): like its creator, none "
                    "of their persons may approve it")
    approval: ApprovalView | None = Field(
        default=None, description="The approval in force: who approved, and when")
    approvals: list[ApprovalView] = Field(
        default_factory=list, description="Every approval, oldest first, revoked ones included")
    testable: bool = Field(
        default=False, description="A test send (POST .../test) is allowed in its status")
    archive: ArchiveView | None = Field(
        default=None, description="Where its per-recipient records went once kept for "
                                  "HERALD_RETENTION_DAYS after it finished (its audit answers "
                                  "410 `archived` since); null: they are still here")
    variants: dict[str, VariantView] | None = Field(
        default=None, description="Its recipients by variant (a translation's tag, `default`, "
                                  "or `erased`) and outcome, kept forever once it is archived")


class CancelResult(BaseModel):
    id: str
    status: Status
    counts: Counts
    cancel: CancelInfo | None


class CampaignPage(BaseModel):
    items: list[CampaignView]
    next_cursor: str | None


class CancelRequest(Strict):
    reason: PlainText | None = Field(default=None, max_length=500)


class PauseRequest(Strict):
    reason: PlainText | None = Field(default=None, max_length=500)


class PauseResult(BaseModel):
    id: str
    status: Status
    counts: Counts
    pause: PauseInfo | None


FOLLOW_UP_ROLLOUT = ("Omitted: the original's staged rollout and its gate, if it had one (in "
                     "waves of the follow-up's own recipients); null: none, every recipient "
                     "at once; a rollout: that one instead")


class RetryRequest(Strict):
    """What a retry may change; omitted: as the original."""

    rollout: RolloutIn | None = Field(default=None, description=FOLLOW_UP_ROLLOUT)

    def keeps_rollout(self) -> bool:
        """Whether the follow-up keeps the original's rollout (``rollout`` omitted, not null)."""
        return "rollout" not in self.model_fields_set


class RetargetRequest(RetryRequest):
    """Optional new content for the follow-up; what is omitted is copied from the original."""

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    body: str | None = Field(default=None, min_length=1, max_length=MAX_BODY_CHARS)
    image_url: HttpUrl | None = None
    data: DataMap | None = None
    options: SendOptions | None = None
    translations: Translations | None = Field(
        default=None, description="Omitted: the original's translations; {} sends every "
                                  "device the new content")
    name: str | None = Field(default=None, max_length=200)
    chunk_size: int | None = Field(default=None, ge=1, le=5000)
    lane: Lane | None = Field(default=None, description="Omitted: the original's lane. " + LANE)
    purpose: Purpose | None = Field(default=None, description="Omitted: the original's "
                                                              "purpose. " + PURPOSE)
    frequency_cap: str | None = Field(
        default=None, max_length=100,
        description="Omitted: the original's (while the follow-up is marketing). " +
                    FREQUENCY_CAP)
    include_suppressed: bool = Field(
        default=False, description="Also the original's recipients a rule suppressed "
                                   "(`suppressed` in its audit, e.g. by the frequency cap); "
                                   "they meet the cap again when sent. Retarget and correct "
                                   "only")

    @field_validator("frequency_cap")
    @classmethod
    def _readable_cap(cls, value: str | None) -> str | None:
        return None if value is None else normalized_choice(value)


class AmendRequest(RetargetRequest):
    """Optional new content for the amend, sent to exactly the recipients FCM accepted the
    original for, with the original's replacement key, so it replaces the original on their
    devices; what is omitted is copied from the original."""

    @field_validator("include_suppressed")
    @classmethod
    def _amends_only_the_sent(cls, value: bool) -> bool:
        if value:
            raise ValueError("an amend replaces what FCM accepted; a suppressed recipient got "
                             "nothing to replace (retarget it instead)")
        return value


class CorrectRequest(RetargetRequest):
    """The corrected content: a new notification to the original's unsent recipients (a
    retarget), a replacement to its sent ones (an amend); what is omitted is copied from the
    original."""


class FollowUpCreated(BaseModel):
    """One follow-up campaign a correction created."""

    id: str
    status: Status
    expected: int = Field(description="Recipients it reaches: the original's final count of "
                                      "unsent (retarget) or sent (amend)")
    targeted: int | None = Field(description="Its own count of recipients once its dispatcher "
                                             "has paged them all (equal to expected); null "
                                             "until then: read it from `href`")
    href: str = Field(description="Where to follow it: /v1/campaigns/{id}")
    languages: dict[str, int] = Field(default_factory=dict, description=AFFECTED_LANGUAGES)


class CorrectResult(BaseModel):
    """Both halves of a correction; a half is null when the original left nobody in it
    (nothing unsent, or nothing sent)."""

    campaign_id: str = Field(description="The original campaign")
    retarget: FollowUpCreated | None = Field(
        description="New notification to the original's unsent recipients")
    amend: FollowUpCreated | None = Field(
        description="Replacement of the original on the devices FCM accepted it for")


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody

