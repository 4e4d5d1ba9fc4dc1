"""What Herald keeps: campaigns, chunks, deliveries, schedules and devices, as typed records.

These are the shapes the service layer reasons about. They know nothing of MongoDB: identifiers
are strings (a campaign's id is 24 hex digits), references between records are those strings,
and every instant is timezone-aware UTC. ``herald.adapters`` translates them to and from BSON
and is the only place that sees an ``ObjectId``.

Records are frozen: a change is a conditional write through a store, which returns the record
as it is afterwards, never an in-place edit that could silently disagree with the database.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from herald.domain.access import Actor
from herald.domain.archive import ArchiveRecord, VariantCounts, ended_at
from herald.domain.audience import Audience
from herald.domain.lanes import Lane, Route, chunk_route
from herald.domain.messages import ProfileNeed, Recipient, SendChunk
from herald.domain.outcomes import RecipientOutcome
from herald.domain.payload import SendOptions, replace_key_for
from herald.domain.purpose import Purpose, reach
from herald.domain.quiet_hours import QuietHoursChoice
from herald.domain.rendering import Translation, profile_need
from herald.domain.rollout import Rollout, RolloutProgress
from herald.domain.status import Status
from herald.domain.suppression import Rule, is_failure, suppressed_by, suppressed_code
from herald.domain.timing import Wave

_PROCESS = os.urandom(5).hex()
_SEQUENCE = itertools.count(int.from_bytes(os.urandom(3), "big"))


def new_id() -> str:
    """A fresh id for a campaign, schedule or device: 24 hex digits laid out as a MongoDB
    ObjectId (seconds since the epoch, a per-process random part, a counter), so ids sort in
    creation order and the adapters store them as ObjectIds. Made here rather than with
    ``bson`` because the domain imports no driver."""
    return f"{int(time.time()):08x}{_PROCESS}{next(_SEQUENCE) % 0x1000000:06x}"


_CAMPAIGNS = itertools.count()


def new_campaign_id() -> str:
    """A fresh campaign id: 24 hex digits laid out as an ObjectId: seconds since the epoch, a
    16-bit sequence of this process (ids of one process sort in creation order), then 48 random
    bits. Every device sees a campaign's id in its replacement key (``herald-<id>``) and the
    cancel credential may see one: with nothing but a counter after the time, one id told the
    ids of the campaigns made around it; now each is one of 2^48 for its neighbour's prefix."""
    return f"{int(time.time()):08x}{next(_CAMPAIGNS) % 0x10000:04x}{os.urandom(6).hex()}"


Cursor = str | int | tuple[int, str] | None
"""Where paging stopped in a recipient source: a device id (an audience), ``(wave, device id)``
(per-device local time), a position (the follow-up of another campaign), or nothing yet."""


class Outcome(StrEnum):
    """What happened to one recipient, as the audit lists it."""

    SENT = "sent"  # FCM accepted the message
    FAILED = "failed"  # FCM refused it (or it was given up on)
    UNSENT = "unsent"  # targeted, but never sent: stopped by a cancel before its turn
    SUPPRESSED = "suppressed"  # held back by a rule of Herald's (a frequency cap), never sent


class FollowUpOf(StrEnum):
    """Which recipients of an earlier campaign a follow-up campaign reaches."""

    UNSENT = "unsent"  # never sent (retarget)
    NOT_SENT = "not_sent"  # unsent, or failed for a reason other than their token (retry)
    SENT = "sent"  # accepted by FCM: an amend replaces what they were shown


class ChunkStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"  # every recipient sent or failed
    CANCELLED = "cancelled"  # cut short by a cancel; the rest stays unsent
    DEAD = "dead"  # dead-lettered; the unrecorded rest counts as failed


CHUNK_CLOSED_FOR_GOOD = frozenset({ChunkStatus.DONE, ChunkStatus.DEAD})
"""Chunks that count towards a campaign's completion (a cancelled chunk finishes nothing)."""


class ScheduleState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"


# --- campaigns -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CampaignCounts:
    """Live counts grow by whole chunks; final counts are recomputed from the records."""

    targeted: int = 0
    sent: int = 0
    failed: int = 0
    maybe_delivered: int = 0
    """Of the failed, those whose request had no answer in time (``TIMEOUT``): FCM may have
    delivered them. Counted in the final counts only."""
    suppressed: int = 0
    """Held back by a rule (``domain/suppression.py``): never sent, neither failed nor unsent."""

    @property
    def unsent(self) -> int:
        """``targeted = sent + failed + unsent + suppressed``."""
        return max(0, self.targeted - self.sent - self.failed - self.suppressed)


@dataclass(frozen=True, slots=True)
class Progress:
    chunks_published: int = 0
    chunks_done: int = 0


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The dispatcher's lease on a campaign and its paging checkpoint."""

    owner: str | None = None
    lease_until: datetime | None = None
    until: str | None = None
    """The newest device the campaign may reach, fixed before the first chunk."""
    next_seq: int = 0
    done: bool = False
    takeovers: int = 0
    waves: tuple[Wave, ...] | None = None

    @property
    def started(self) -> bool:
        return self.owner is not None


class DecisionKind(StrEnum):
    """What a decision about a campaign's sending was (``herald/service_layer/stopping/``)."""

    CANCEL = "cancel"
    STOP = "stop"  # Herald stopped it: FCM refused it as misconfigured (ends failed)
    PAUSE = "pause"
    RESUME = "resume"

    @property
    def stops_pods(self) -> bool:
        """Whether pods that may be sending must acknowledge it (a resume starts them)."""
        return self is not DecisionKind.RESUME


@dataclass(frozen=True, slots=True)
class Decision:
    """The latest decision about a campaign's sending. Every decision is written conditionally
    on the one it replaces (its id as read), so of two made at once exactly one stands, and a
    broadcast names the decision it tells: a pod acts only on the campaign's latest one."""

    id: str
    kind: DecisionKind
    at: datetime


@dataclass(frozen=True, slots=True)
class CancelRecord:
    requested_at: datetime
    reason: str | None = None
    requested_by: Actor | None = None
    """The key (or AMQP user) that asked; never what a caller claims about itself."""
    on_behalf_of: str | None = None
    """What the caller said about itself (``X-Requested-By``): information only."""
    expected_pods: tuple[str, ...] | None = ()
    """Senders and dispatchers alive at the request; None when Redis could not tell."""
    acks: tuple[str, ...] = ()
    acknowledged_at: datetime | None = None
    finalizer: str | None = None
    finalizer_until: datetime | None = None
    decision_id: str | None = None
    """The decision that began this cancel (``Campaign.decision``); acknowledgements name it."""
    nothing_in_flight: bool = False
    """The decider found nothing that could be sending it (not started, or a settled pause):
    it is settled at once, waiting for no pod."""
    fails_with: str | None = None
    """Set when Herald stopped the campaign itself because FCM refused it as misconfigured
    (``herald/domain/fcm_errors.py``): the campaign ends ``failed`` with this as its error,
    and a retry after the fix sends to exactly the recipients it did not reach."""


class PauseKind(StrEnum):
    """Who paused a campaign: an operator (or an AMQP tool), or the staged rollout's gate."""

    MANUAL = "manual"
    GATE = "gate"


@dataclass(frozen=True, slots=True)
class PauseRecord:
    """The campaign's latest pause (``docs/sending-safely.md``): decided once by the guarded
    ``in_progress → paused`` transition; each sender and dispatcher alive then acknowledges once
    it has nothing of the campaign in flight; the last acknowledgement (or the sweep) settles it
    with exact counts. A resume keeps the record, with who resumed it and when."""

    pause_id: str
    """Tells this pause from an earlier one of the same campaign (acknowledgements name it)."""
    requested_at: datetime
    reason: str | None = None
    requested_by: Actor | None = None
    kind: PauseKind = PauseKind.MANUAL
    expected_pods: tuple[str, ...] | None = ()
    """Senders and dispatchers alive at the request; None when Redis could not tell."""
    acks: tuple[str, ...] = ()
    settled_at: datetime | None = None
    """When every pod had stopped: from then on nothing of the campaign is in flight."""
    counts: CampaignCounts | None = None
    """Exact counts when it settled, from the records (the live counts grow by whole chunks,
    and a paused chunk is not closed)."""
    resumed_at: datetime | None = None
    resumed_by: Actor | None = None
    resume_id: str | None = None
    """The decision that resumed it; the resumed campaign's pending chunks are offered again
    by the dispatchers' sweep until ``offered_at`` says they were."""
    offered_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A campaign sent to recipients of an earlier one rather than to an audience."""

    campaign_id: str
    outcome: FollowUpOf
    with_suppressed: bool = False
    """Also the original's recipients a rule suppressed (a retarget that asked for them)."""

    def size_in(self, counts: CampaignCounts) -> int:
        """How many recipients it reaches at most, from its original's final counts."""
        size = {FollowUpOf.UNSENT: counts.unsent, FollowUpOf.SENT: counts.sent,
                FollowUpOf.NOT_SENT: counts.unsent + counts.failed}[self.outcome]
        return size + (counts.suppressed if self.with_suppressed else 0)


@dataclass(frozen=True, slots=True)
class LocalTime:
    """Per-device local-time delivery: the wall clock, and the zone of devices without one."""

    wall: str
    timezone: str


@dataclass(frozen=True, slots=True)
class CampaignContent:
    title: str
    body: str
    data: dict[str, str] = field(default_factory=dict)
    image_url: str | None = None
    options: SendOptions | None = None
    translations: dict[str, Translation] = field(default_factory=dict)
    """By language tag (canonical); a campaign stored before translations existed has none."""

    @property
    def profile_need(self) -> ProfileNeed | None:
        """What of each device its messages read; None for one message to every device."""
        return profile_need(self.title, self.body, self.data, self.translations)


@dataclass(frozen=True, slots=True)
class ApprovedLimits:
    """How fast and how soon an approval let the campaign send: a change within them (a lower
    rate cap, a later time) keeps the approval; one beyond them needs a new one."""

    rate_per_s: int | None
    """The rate cap approved (None: uncapped)."""
    due_at: datetime
    """The earliest time approved."""


@dataclass(frozen=True, slots=True)
class Approval:
    """A second person's approval of a large campaign, bound to ``digest`` (``approval.py``)."""

    digest: str
    by: Actor
    at: datetime
    revoked_at: datetime | None = None
    revoked_by: Actor | None = None
    """Who changed what was approved (an edit), which revoked it."""
    limits: ApprovedLimits | None = None
    """None only for approvals given before limits were recorded (then only ``digest`` binds)."""

    def revoked(self, now: datetime, by: Actor) -> Approval:
        return replace(self, revoked_at=now, revoked_by=by)


@dataclass(frozen=True, slots=True)
class Campaign:
    id: str
    status: Status
    content: CampaignContent
    created_at: datetime
    updated_at: datetime
    due_at: datetime
    name: str | None = None
    audience: Audience | None = None
    follow_up: FollowUp | None = None
    chunk_size: int = 500
    rate_per_s: int | None = None
    lane: Lane = Lane.STANDARD
    """Which campaigns go first when several send at once (``domain/lanes.py``)."""
    purpose: Purpose | None = None
    """Marketing or transactional (``domain/purpose.py``); None: stored before purposes
    existed, it reaches what its audience says."""
    frequency_cap: str | None = None
    """Its own frequency cap (``domain/frequency_cap.py``): None, ``HERALD_MARKETING_CAP``;
    ``none``, not capped; else a cap checked with the setting's."""
    quiet_hours: QuietHoursChoice | None = None
    """Its own quiet hours (``domain/quiet_hours.py``): None, ``HERALD_QUIET_HOURS`` held,
    devices without a timezone in UTC; else its window (or ``off``), mode and timezone."""
    counts: CampaignCounts = CampaignCounts()
    progress: Progress = Progress()
    dispatch: Dispatch = Dispatch()
    cancel: CancelRecord | None = None
    pause: PauseRecord | None = None
    decision: Decision | None = None
    """The latest decision about its sending (cancel, stop, pause, resume), if any."""
    rollout: Rollout | None = None
    rollout_progress: RolloutProgress | None = None
    error: str | None = None
    source: str = "api"
    schedule_id: str | None = None
    local_time: LocalTime | None = None
    replace_key: str | None = None
    """The replacement key the campaign named (or, for a follow-up, its original's key); None:
    the one derived from its id."""
    amended_by: tuple[str, ...] = ()
    """The amends of this campaign, oldest first. Stored as an array from the start, because
    nx-27017's ``$addToSet`` on a missing field does nothing."""
    created_by: Actor | None = None
    edited_by: Actor | None = None
    editors: tuple[Actor, ...] = ()
    """Who changed what an approval covers since its last approval was given (for a schedule's
    run: also who wrote its schedule's template). Neither they nor its creator may approve it."""
    run_key: str | None = None
    started_at: datetime | None = None
    first_request_at: datetime | None = None
    """When the first FCM request of the campaign started (``herald_first_request_seconds``)."""
    finished_at: datetime | None = None
    fired_at: datetime | None = None
    fired_by: str | None = None
    approval_required: bool = False
    """Created for at least ``HERALD_APPROVAL_MIN_AUDIENCE`` devices: it sends only approved."""
    audience_estimate: int | None = None
    """The devices its audience selected when it was created (or last edited)."""
    approvals: tuple[Approval, ...] = ()
    """Every approval, oldest first; the last one, unless revoked, is in force."""
    revision: int = 0
    """Incremented by every edit: an approval is written only for the revision it read."""
    archive: ArchiveRecord | None = None
    """Where its per-recipient records went once kept for ``HERALD_RETENTION_DAYS``
    (``service_layer/archiving.py``); None: its chunks and deliveries are still here."""
    variants: dict[str, VariantCounts] | None = None
    """Its recipients by variant and outcome, written when it was archived (kept forever)."""

    @property
    def approval(self) -> Approval | None:
        """The approval in force, if any (an edit that changed what it covered revoked it)."""
        last = self.approvals[-1] if self.approvals else None
        return last if last is not None and last.revoked_at is None else None

    @property
    def all_chunks_finished(self) -> bool:
        """Paging is over and every published chunk is closed for good."""
        return self.dispatch.done and (
            self.progress.chunks_done >= self.progress.chunks_published)

    @property
    def due_since(self) -> datetime:
        """Since when it could send: when it was due, or approved if that came later."""
        approval = self.approval
        return max(self.due_at, approval.at) if approval is not None else self.due_at

    @property
    def reach(self) -> Audience | None:
        """The devices it may reach: its audience narrowed by its purpose (None: a follow-up,
        which reaches recipients of its original)."""
        return None if self.audience is None else reach(self.audience, self.purpose)

    @property
    def route(self) -> Route:
        """The queue its chunks wait in (``herald/domain/lanes.py``)."""
        return chunk_route(self.lane, self.rate_per_s)

    def chunk_message(self, seq: int, recipients: Sequence[Recipient]) -> SendChunk:
        """The message that offers its chunk ``seq`` to the senders, on its route."""
        route = self.route
        return SendChunk(campaign_id=self.id, seq=seq, recipients=list(recipients),
                         route=None if route is Route.STANDARD else route)

    @property
    def sent_with_key(self) -> str:
        """The replacement key every message of the campaign carries (``payload.py``)."""
        return replace_key_for(self.id, self.replace_key)

    @property
    def amends(self) -> str | None:
        """The campaign this one amends (it replaces that one's notification), if any."""
        follow_up = self.follow_up
        return follow_up.campaign_id if follow_up and follow_up.outcome is FollowUpOf.SENT else None

    @property
    def ended_at(self) -> datetime | None:
        """When it finished (None: it has not)."""
        return ended_at(self.status, self.finished_at, self.updated_at)

    @property
    def source_not_exhausted(self) -> bool:
        """The dispatcher started paging but did not reach the end of the source."""
        return self.dispatch.started and not self.dispatch.done


# --- chunks and deliveries -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChunkState:
    """A chunk without its recipients: what a sender checks before taking it."""

    campaign_id: str
    seq: int
    size: int
    cursor: Cursor
    status: ChunkStatus
    created_at: datetime
    attempts: int = 0
    owner: str | None = None
    owner_until: datetime | None = None
    rescued_at: datetime | None = None
    """When the sweep last offered this chunk to the live senders (its holder's heartbeat had
    expired)."""
    fence: int = 0
    """The chunk's fencing token: every claim, takeover and renewal increments it, and each is
    conditional on the value its maker read, so of a holder back from a freeze renewing and
    another pod taking the chunk over, exactly one succeeds."""
    sent: int = 0
    failed: int = 0
    suppressed: int = 0
    finished_at: datetime | None = None
    wave_sent: int = -1
    """A staged rollout's last wave whose recipients in this chunk all have an outcome (the
    chunk stays pending until the last wave)."""
    erased: int = 0
    """Recipients replaced by the erased placeholder since the chunk was written (a person
    erased): a sender that claims a chunk with some reads its recipients from the store rather
    than from the message, which still carries them."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A frozen slice of a campaign's recipients, written before it is published."""

    state: ChunkState
    recipients: tuple[Recipient, ...]

    @property
    def campaign_id(self) -> str:
        return self.state.campaign_id

    @property
    def seq(self) -> int:
        return self.state.seq


Recorded = dict[int, str | None]
"""Outcomes recorded for a chunk: position in the chunk → FCM error, ``None`` meaning sent, or
the code of the rule that suppressed it (``domain/suppression.py``)."""


@dataclass(frozen=True, slots=True)
class Failure:
    position: int
    error: str


@dataclass(frozen=True, slots=True)
class Suppression:
    position: int
    rule: Rule


@dataclass(frozen=True, slots=True)
class Delivery:
    """FCM's answers for one batch of a chunk, by position in the chunk; only ever inserted."""

    campaign_id: str
    seq: int
    pod: str
    at: datetime
    sent: tuple[int, ...] = ()
    failed: tuple[Failure, ...] = ()
    suppressed: tuple[Suppression, ...] = ()

    @classmethod
    def of(cls, campaign_id: str, seq: int, pod: str, at: datetime,
           outcomes: Sequence[RecipientOutcome]) -> Delivery:
        """The record of one group of outcomes, by position."""
        return cls(campaign_id=campaign_id, seq=seq, pod=pod, at=at,
                   sent=tuple(o.position for o in outcomes if o.error is None),
                   failed=tuple(Failure(o.position, code) for o in outcomes
                                if is_failure(code := o.code) and code is not None),
                   suppressed=tuple(Suppression(o.position, rule) for o in outcomes
                                    if (rule := suppressed_by(o.code)) is not None))

    def add_to(self, recorded: Recorded) -> Recorded:
        """Add these outcomes to ``recorded``; the first record of a position wins."""
        for position in self.sent:
            recorded.setdefault(position, None)
        for failure in self.failed:
            recorded.setdefault(failure.position, failure.error)
        for suppression in self.suppressed:
            recorded.setdefault(suppression.position, suppressed_code(suppression.rule))
        return recorded


# --- test sends ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TestOutcome:
    """FCM's answer to a test send to one device: ``error`` None means FCM accepted it."""

    __test__ = False  # not a pytest test class

    device_id: str
    token_suffix: str
    """The token's last characters: enough to recognise it, never the whole token."""
    user_id: str | None
    error: str | None = None
    message: str | None = None
    erased: bool = False
    """The device's person was erased since: ``device_id``, ``token_suffix`` and ``user_id``
    are blank, the answer stays."""

    @property
    def accepted(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class TestSend:
    """A campaign's exact message sent to a few named devices, recorded apart from the
    campaign: never in its counts, its chunks, its deliveries or its audit."""

    __test__ = False  # not a pytest test class

    id: str
    campaign_id: str
    at: datetime
    by: Actor
    status: Status
    """The campaign's status when it was sent."""
    outcomes: tuple[TestOutcome, ...]


# --- schedules -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScheduleClaim:
    by: str
    until: datetime


@dataclass(frozen=True, slots=True)
class ScheduleRunRecord:
    occurrence: datetime
    outcome: str  # "fired" | "missed"
    campaign_id: str | None
    reason: str | None
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    template: dict[str, Any]
    """A ``CampaignTemplate`` as JSON, validated when the schedule was made."""
    cron: str
    timezone: str
    state: ScheduleState
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    name: str | None = None
    misfire_grace_s: int | None = None
    claim: ScheduleClaim | None = None
    runs: tuple[ScheduleRunRecord, ...] = ()
    missed_total: int = 0
    created_by: Actor | None = None
    updated_by: Actor | None = None
    template_authors: tuple[Actor, ...] = ()
    """Who replaced its template since it was made (one actor per person): they, like its
    creator, may not approve its runs."""


# --- devices ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Device:
    id: str
    token: str
    platform: str
    created_at: datetime
    updated_at: datetime
    user_id: str | None = None
    push_enabled: bool = True
    marketing_enabled: bool = False
    topics: tuple[str, ...] = ()
    locale: str | None = None
    timezone: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    invalid: bool = False
    invalid_reason: str | None = None


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    created: int
    updated: int


@dataclass(frozen=True, slots=True)
class IdempotencyBinding:
    """A client's ``Idempotency-Key``, bound to the campaign its first request created."""

    key: str
    fingerprint: str
    campaign_id: str
    created_at: datetime
