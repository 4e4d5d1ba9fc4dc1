"""Creating campaigns: from an HTTP request (idempotently), or as the follow-up of another."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from herald.clock import utcnow
from herald.contracts import http
from herald.contracts.http import CampaignCreate, CampaignPatch, RetargetRequest, RetryRequest
from herald.domain.access import Actor, Role
from herald.domain.approval import (
    after_edit,
    approval_of,
    editors_after,
    unapproved_reach,
    widening_refusal,
    widens_rate,
)
from herald.domain.audience import Audience
from herald.domain.documents import (
    Campaign,
    CampaignContent,
    FollowUp,
    FollowUpOf,
    IdempotencyBinding,
    LocalTime,
    new_campaign_id,
)
from herald.domain.frequency_cap import follow_up_choice
from herald.domain.lanes import Lane
from herald.domain.purpose import Purpose, follow_up_purpose
from herald.domain.quiet_hours import QuietHoursChoice
from herald.domain.quiet_hours import campaign_choice as quiet_campaign_choice
from herald.domain.rollout import HaltWhen, Rollout, RolloutProgress, RolloutWave
from herald.domain.status import EDITABLE, TERMINAL, Status, Transition, apply
from herald.domain.timing import AmbiguousTime, first_instant_anywhere, to_utc
from herald.service_layer.approval import ApprovalGate, ApprovalRefused
from herald.service_layer.errors import CampaignArchived
from herald.service_layer.ports import Bus, IdempotencyRepository, NewCampaigns, ScheduledCampaigns

log = logging.getLogger(__name__)

STALE_KEY_AFTER = timedelta(seconds=30)
"""An idempotency key whose campaign never appeared within this time belonged to a dead request."""

SEND_AT_TOLERANCE = timedelta(seconds=1)


class SendAtInPast(ValueError):
    pass


class IdempotencyMismatch(Exception):
    """The key was used before with a different request body."""


class IdempotencyInFlight(Exception):
    """The first request with this key is still creating its campaign."""


class NotFinished(Exception):
    """The campaign is still running: what follows it up must wait for its final outcomes."""

    action = "follow it up"

    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; {self.action} once it has finished")
        self.status = status


class NotRetargetable(NotFinished):
    action = "retarget it"


class NotAmendable(NotFinished):
    action = "amend it (cancel it first to stop it)"


class NotCorrectable(NotFinished):
    action = "correct it (cancel it first to stop it)"


class NothingToAmend(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign was {status.value} without FCM accepting any message: there "
                         "is nothing to replace; retarget it instead")
        self.status = status


class NothingToCorrect(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign was {status.value} with nobody sent and nobody unsent: "
                         "there is no one to correct")
        self.status = status


class NothingToFollowUp(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign was {status.value} before it targeted anyone: there is no "
                         "one to follow up; create it again instead")
        self.status = status


class NotRetryable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a failed campaign can be retried")
        self.status = status


class InvalidChange(ValueError):
    """A change that would leave the campaign invalid (e.g. over FCM's size limit)."""

    def __init__(self, error: ValidationError) -> None:
        super().__init__(str(error))
        self.error = error


class NotEditable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a scheduled campaign (or one "
                         "awaiting approval) can be changed")
        self.status = status


class FollowUpAudience(ValueError):
    """A follow-up reaches recipients of its original, never an audience."""

    def __init__(self) -> None:
        super().__init__("a follow-up (retarget, amend, correct, retry) reaches recipients of "
                         "its original: its audience cannot be changed")


@dataclass(frozen=True)
class Created:
    campaign: Campaign
    created: bool


@dataclass(frozen=True)
class Correction:
    """What ``CampaignCreator.correct`` made of a finished campaign: a retarget of its unsent
    and an amend of its sent, each None when the original left nobody in that group."""

    original: Campaign
    retarget: Campaign | None
    amend: Campaign | None


def new_campaign(*, content: CampaignContent, name: str | None, audience: Audience | None,
                 follow_up: FollowUp | None, chunk_size: int, rate_per_s: int | None,
                 due_at: datetime, now: datetime, source: str, schedule_id: str | None = None,
                 local_time: LocalTime | None = None, run_key: str | None = None,
                 replace_key: str | None = None, created_by: Actor | None = None,
                 rollout: Rollout | None = None, lane: Lane = Lane.STANDARD,
                 purpose: Purpose | None = None, frequency_cap: str | None = None,
                 quiet_hours: QuietHoursChoice | None = None) -> Campaign:
    """A fresh campaign, ``scheduled`` if ``due_at`` is in the future, else ``pending``;
    ``replace_key`` is the key it names (None: the one derived from its id). ``purpose`` is
    what the request named or defaulted to (``marketing``, ``contracts/http.py``); None builds
    a campaign as stored before purposes (its audience as is)."""
    return Campaign(
        id=new_campaign_id(), status=Status.SCHEDULED if due_at > now else Status.PENDING,
        content=content, name=name, audience=audience, follow_up=follow_up,
        chunk_size=chunk_size, rate_per_s=rate_per_s, lane=lane, purpose=purpose,
        frequency_cap=frequency_cap, quiet_hours=quiet_hours, source=source,
        schedule_id=schedule_id,
        local_time=local_time, run_key=run_key, replace_key=replace_key,
        created_by=created_by, created_at=now, updated_at=now, due_at=due_at,
        rollout=rollout, rollout_progress=RolloutProgress() if rollout else None)


def quiet_hours_of(asked: http.QuietHoursAsked, purpose: Purpose,
                   timezone: str | None) -> QuietHoursChoice | None:
    """The quiet hours a validated request asks for (``quiet_hours``) for a campaign of
    ``purpose``, its devices without a timezone read in ``timezone`` (the campaign's, or a
    schedule's)."""
    window, mode = http.quiet_hours_asked(asked)
    return quiet_campaign_choice(window, mode, timezone, purpose, asked=asked is not None)


def rollout_of(request: http.RolloutIn | None) -> Rollout | None:
    """The rollout a validated request asks for."""
    if request is None:
        return None
    halt = request.halt_when
    return Rollout(waves=tuple(RolloutWave(w.percent, w.hold_s) for w in request.waves),
                   halt_when=HaltWhen(halt.failure_rate_above, halt.min_attempts) if halt else None)


def content_of(template: http.Content) -> CampaignContent:
    """What a validated request asks the devices to show."""
    return CampaignContent(title=template.title, body=template.body, data=dict(template.data),
                   image_url=str(template.image_url) if template.image_url else None,
                   options=template.options, translations=dict(template.translations))


def sized(content: dict[str, Any], replace_key: str) -> CampaignContent:
    """``content`` as it will be sent with ``replace_key``; :class:`InvalidChange` if it is
    not valid or, with that key, over FCM's size limit."""
    try:
        return content_of(http.KeyedContent.model_validate({**content,
                                                           "replace_key": replace_key}))
    except ValidationError as exc:
        raise InvalidChange(exc) from exc


def _follow_up_content(request: RetargetRequest, base: CampaignContent,
                       replace_key: str) -> CampaignContent:
    """The follow-up's content: what the request gives, the original's for the rest, sized
    with the key it is sent with."""
    return sized({"title": request.title or base.title, "body": request.body or base.body,
                  "data": base.data if request.data is None else request.data,
                  "image_url": str(request.image_url) if request.image_url else base.image_url,
                  "options": base.options if request.options is None else request.options,
                  "translations": base.translations if request.translations is None
                  else request.translations},
                 replace_key)


def _due_at(request: CampaignCreate, now: datetime) -> datetime:
    if request.send_at is None:
        return now
    due_at = to_utc(request.send_at, request.timezone)
    if due_at < now - SEND_AT_TOLERANCE:
        raise SendAtInPast(f"send_at {due_at.isoformat()} is in the past; omit it to send now")
    if request.deliver_in_local_time:
        # Dispatch starts where the wall clock gets there first; it then waits for each zone.
        return max(now, first_instant_anywhere(request.send_at))
    return due_at


def _local_time(request: CampaignCreate) -> LocalTime | None:
    if not request.deliver_in_local_time or request.send_at is None or request.timezone is None:
        return None
    return LocalTime(wall=request.send_at.isoformat(), timezone=request.timezone)


def fingerprint(request: BaseModel, exclude: set[str] | None = None) -> str:
    canonical = orjson.dumps(request.model_dump(mode="json", exclude=exclude),
                             option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def _follow_up_print(request: RetryRequest) -> str:
    """A follow-up request's fingerprint: ``"rollout": null`` (drop the original's) is not
    the same request as no ``rollout`` at all (keep it), and one without it prints as before
    the field existed."""
    return fingerprint(request, exclude={"rollout"} if request.keeps_rollout() else None)


def follow_up_rollout(request: RetryRequest, parent: Campaign) -> Rollout | None:
    """The follow-up's staged rollout: the original's, with its gate, unless the request
    names another (or ``null``: none). A follow-up starts its waves afresh, over its own
    recipients (its wave buckets are keyed by its own id)."""
    return parent.rollout if request.keeps_rollout() else rollout_of(request.rollout)


FOLLOW_UP_SOURCES = {FollowUpOf.UNSENT: "retarget", FollowUpOf.SENT: "amend",
                     FollowUpOf.NOT_SENT: "retry"}
"""What each kind of follow-up is called: its ``source``, and its action in the operator log."""


class CampaignCreator:
    def __init__(self, campaigns: NewCampaigns, idempotency: IdempotencyRepository,
                 bus: Bus, approvals: ApprovalGate | None = None) -> None:
        self._campaigns = campaigns
        self._idempotency = idempotency
        self._bus = bus
        self._approvals = approvals

    @property
    def approvals(self) -> ApprovalGate | None:
        """The approval threshold its campaigns are held by (None: none)."""
        return self._approvals

    async def held_if_large(self, campaign: Campaign, size: int | None = None,
                            together: int | None = None) -> Campaign:
        """``campaign`` held ``awaiting_approval`` if it reaches at least
        ``HERALD_APPROVAL_MIN_AUDIENCE`` devices (its audience counted now, or ``size``; or,
        given, ``together``: what it sends with other sends that need no approval)."""
        gate = self._approvals
        if gate is None or gate.min_audience is None:
            return campaign
        reach = campaign.reach
        if size is None and reach is not None:
            size = await gate.size_of(reach)
        return gate.held(campaign, size, together)

    async def _reach_together(self, parent: Campaign, size: int) -> int | None:
        """What a follow-up of ``size`` recipients sends together with the follow-ups of the
        same original that went without an approval (None: approvals are off)."""
        gate = self._approvals
        if gate is None or gate.min_audience is None:
            return None
        return size + unapproved_reach(await self._campaigns.follow_ups_of(parent.id))

    async def create(self, request: CampaignCreate, idempotency_key: str | None,
                     by: Actor) -> Created:
        """Create (and launch, if due) the campaign ``by`` asks for. A retry with the same
        ``Idempotency-Key`` from the same key gets the first campaign back; keys never share
        idempotency keys."""
        now = utcnow()
        campaign = new_campaign(
            content=content_of(request), name=request.name, audience=request.audience,
            follow_up=None, chunk_size=request.chunk_size, rate_per_s=request.rate_per_s,
            due_at=_due_at(request, now), now=now, source="api",
            local_time=_local_time(request), replace_key=request.replace_key, created_by=by,
            rollout=rollout_of(request.rollout), lane=request.lane, purpose=request.purpose,
            frequency_cap=request.frequency_cap,
            quiet_hours=quiet_hours_of(request.quiet_hours, request.purpose, request.timezone))
        if idempotency_key is not None:
            earlier = await self._earlier_campaign(f"{by.id}:{idempotency_key}",
                                                   fingerprint(request), campaign)
            if earlier is not None:
                return Created(earlier, created=False)
        campaign = await self.held_if_large(campaign)
        await self.launch(campaign)
        return Created(campaign, created=True)

    async def retarget(self, parent_id: str, request: RetargetRequest, by: Actor,
                       idempotency_key: str | None = None) -> Campaign | None:
        """A new campaign to exactly the unsent recipients of a finished one; None if unknown."""
        parent = await self._finished(parent_id, NotRetargetable)
        if parent is None:
            return None
        if not parent.dispatch.started:
            raise NothingToFollowUp(parent.status)
        return await self._follow_up(parent, request, FollowUpOf.UNSENT, by, idempotency_key)

    async def amend(self, parent_id: str, request: RetargetRequest, by: Actor,
                    idempotency_key: str | None = None) -> Campaign | None:
        """A new campaign to exactly the recipients FCM accepted a finished campaign for, with
        that campaign's replacement key, so that on their devices it replaces what they were
        shown (an amend of an amend keeps the first key). None if unknown."""
        parent = await self._finished(parent_id, NotAmendable)
        if parent is None:
            return None
        if parent.counts.sent == 0:
            raise NothingToAmend(parent.status)
        return await self._follow_up(parent, request, FollowUpOf.SENT, by, idempotency_key)

    async def correct(self, parent_id: str, request: RetargetRequest, by: Actor,
                      idempotency_key: str | None = None) -> Correction | None:
        """Correct a finished campaign in one step: the corrected content as a new notification
        to its unsent recipients (a retarget) and as a replacement to its sent ones (an amend);
        a half whose group is empty is not created. None if unknown.

        Nobody gets both halves, whether they come from this call or from separate retarget and
        amend calls, one after the other or at once: each half's dispatcher pages one part of
        the original's audit, ``unsent`` or ``sent``, and those parts cannot share anyone.

        - At any one reading, a recipient's outcome is a function of the records of its
          position in its chunk: ``sent`` if the first record is a success, ``failed`` if it is
          an error, ``unsent`` if there is none (``recipients.outcome_of``). One position, one
          outcome.
        - Both halves read the original only once it is finished, and a finished campaign's
          records no longer change: it completed or failed once every chunk was closed for good
          (every position recorded; a dead-lettered chunk's rest recorded failed), or it was
          cancelled once every sender alive at the cancel had acknowledged, after recording the
          requests it had on the wire; its unpaged rest is the audience beyond its paging
          cursor, never in a chunk, so never ``sent`` (``recipients.unpaged``). So every
          reading, by either half, whenever its dispatcher pages, sees the same outcomes, and
          the positions a follow-up resumes from stay valid (but for a device of that rest
          deleted meanwhile: docs/known-gaps.md).

        The crash gap of docs/known-gaps.md is the one way a device can have the original without being
        ``sent`` (a sender killed with a batch on the wire, then a cancel): the retarget carries
        the original's key too, so there it replaces the original instead of adding to it.

        With an ``Idempotency-Key`` each half is bound to it as a retarget or an amend of this
        campaign by this key: a repeated call (or a retarget or amend with the same key and
        body) returns the same follow-ups, and one that died half-way is completed.
        """
        parent = await self._finished(parent_id, NotCorrectable)
        if parent is None:
            return None
        counts = parent.counts
        not_sent = FollowUp(parent.id, FollowUpOf.UNSENT,
                            with_suppressed=request.include_suppressed).size_in(counts)
        if not_sent == 0 and counts.sent == 0:
            raise NothingToCorrect(parent.status)
        # Both halves are one correction: the threshold judges them together, never each apart.
        together = await self._reach_together(parent, not_sent + counts.sent)
        retarget = await self._follow_up(parent, request, FollowUpOf.UNSENT, by,
                                         idempotency_key, together) if not_sent else None
        amend = await self._follow_up(parent, request, FollowUpOf.SENT, by,
                                      idempotency_key, together) if counts.sent else None
        return Correction(parent, retarget, amend)

    async def retry(self, parent_id: str, by: Actor, idempotency_key: str | None = None,
                    request: RetryRequest | None = None) -> Campaign | None:
        """Re-run a ``failed`` campaign for everyone it did not reach: unsent, or failed for a
        reason other than their token (an operator's manual retry), with its content and, unless
        ``request`` says otherwise, its rollout. None if unknown."""
        parent = await self._campaigns.get(parent_id)
        if parent is None:
            return None
        if parent.status is not Status.FAILED:
            raise NotRetryable(parent.status)
        if parent.archive is not None:
            raise CampaignArchived(parent.id, parent.archive)
        asked = RetargetRequest.model_validate(
            request.model_dump(exclude_unset=True) if request is not None else {})
        return await self._follow_up(parent, asked, FollowUpOf.NOT_SENT, by, idempotency_key)

    async def _finished(self, campaign_id: str,
                        refusal: type[NotFinished]) -> Campaign | None:
        campaign = await self._campaigns.get(campaign_id)
        if campaign is not None and campaign.status not in TERMINAL:
            raise refusal(campaign.status)
        if campaign is not None and campaign.archive is not None:
            raise CampaignArchived(campaign.id, campaign.archive)  # its recipients are gone
        return campaign

    async def _follow_up(self, parent: Campaign, request: RetargetRequest, of: FollowUpOf,
                         by: Actor, idempotency_key: str | None,
                         together: int | None = None) -> Campaign:
        """A campaign to the ``of`` recipients of ``parent``. It carries ``parent``'s
        replacement key: an amend must, to replace; a retarget or retry reaches devices that
        were meant to get ``parent`` (and may have, in the crash gap, or had the original of an
        amend), so there too it replaces rather than adds. It keeps ``parent``'s staged rollout
        and gate unless ``request`` says otherwise (:func:`follow_up_rollout`).

        Whether it waits for an approval is judged on what it sends together with the other
        follow-ups of ``parent`` that need none (``together``; by default counted now): an
        original's recipients split into follow-ups each under the threshold still need one."""
        now = utcnow()
        source = FOLLOW_UP_SOURCES[of]
        follow_up = FollowUp(parent.id, of, with_suppressed=(
            request.include_suppressed and of is FollowUpOf.UNSENT))
        purpose = follow_up_purpose(request.purpose, parent.purpose, parent.reach)
        campaign = new_campaign(
            content=_follow_up_content(request, parent.content, parent.sent_with_key),
            name=request.name or f"{parent.name or parent.id} ({source})",
            audience=None, follow_up=follow_up,
            chunk_size=request.chunk_size or parent.chunk_size, rate_per_s=parent.rate_per_s,
            due_at=now, now=now, source=source, schedule_id=parent.schedule_id,
            replace_key=parent.sent_with_key, created_by=by,
            rollout=follow_up_rollout(request, parent), lane=request.lane or parent.lane,
            purpose=purpose,
            frequency_cap=follow_up_choice(request.frequency_cap, parent.frequency_cap, purpose))
        size = follow_up.size_in(parent.counts)
        if together is None:
            together = await self._reach_together(parent, size)
        campaign = await self.held_if_large(campaign, size, together)
        if idempotency_key is not None:
            # Scoped to the action, the original and the key: never equal to a creation's key.
            key = f"{source}/{parent.id}/{by.id}:{idempotency_key}"
            earlier = await self._earlier_campaign(key, _follow_up_print(request), campaign)
            if earlier is not None:
                await self._link(earlier)  # a first call that died before linking it
                return earlier
        await self._campaigns.insert(campaign)
        await self._link(campaign)
        if campaign.status is Status.PENDING:
            await self.wake_dispatcher(campaign.id)
        return campaign

    async def _link(self, follow_up: Campaign) -> None:
        """An amend is listed on its original (``amended_by``), once however often linked."""
        if follow_up.amends is not None:
            await self._campaigns.link_amendment(follow_up.amends, follow_up.id)

    async def launch(self, campaign: Campaign) -> None:
        """Store the campaign and, if it is due, wake a dispatcher (its sweep is the fallback)."""
        await self._campaigns.insert(campaign)
        if campaign.status is Status.PENDING:
            await self.wake_dispatcher(campaign.id)

    async def wake_dispatcher(self, campaign_id: str) -> None:
        try:
            await self._bus.request_dispatch(campaign_id)
        except Exception:  # the dispatchers' periodic sweep claims it anyway
            log.warning("could not publish dispatch of %s; the sweep will pick it up",
                        campaign_id, exc_info=True)

    async def _earlier_campaign(self, key: str, print_: str, campaign: Campaign) -> Campaign | None:
        binding = IdempotencyBinding(key, print_, campaign.id, campaign.created_at)
        for _ in range(20):
            bound = await self._idempotency.reserve(binding)
            if bound is None:
                return None
            if bound.fingerprint != print_:
                raise IdempotencyMismatch(key)
            earlier = await self._campaigns.get(bound.campaign_id)
            if earlier is not None:
                return earlier
            stale = utcnow() - bound.created_at > STALE_KEY_AFTER
            if stale and await self._idempotency.rebind(key, bound.campaign_id,
                                                                campaign.id):
                return None
            await asyncio.sleep(0.05)
        raise IdempotencyInFlight(key)


def _moved(current: Campaign, patch: CampaignPatch) -> tuple[datetime, LocalTime | None]:
    """``due_at`` (and the wall clock of a local-time campaign) after moving a campaign."""
    local = current.local_time
    wall = datetime.fromisoformat(local.wall) if local else None
    try:
        timing = CampaignCreate(
            title="-", body="-", send_at=patch.send_at or wall, deliver_in_local_time=bool(local),
            timezone=patch.timezone or (local.timezone if local else None))
    except ValidationError as exc:
        raise InvalidChange(exc) from exc
    if timing.send_at is None:
        raise AmbiguousTime("a timezone alone does not move a campaign: give send_at too")
    return _due_at(timing, utcnow()), _local_time(timing) if local else None


def _edited(current: Campaign, patch: CampaignPatch, by: Actor) -> Campaign:
    """``current`` with the patch applied; its content must still fit FCM's limits."""
    given = patch.model_fields_set
    content = sized({"title": patch.title or current.content.title,
                     "body": patch.body or current.content.body,
                     "data": current.content.data if patch.data is None else patch.data,
                     "image_url": patch.image_url if "image_url" in given and patch.image_url
                     else current.content.image_url,
                     "options": current.content.options if patch.options is None
                     else patch.options,
                     "translations": current.content.translations if patch.translations is None
                     else patch.translations}, current.sent_with_key)
    edited = replace(
        current, content=content, name=current.name if patch.name is None else patch.name,
        audience=current.audience if patch.audience is None else patch.audience, edited_by=by,
        rate_per_s=patch.rate_per_s if "rate_per_s" in given else current.rate_per_s)
    if patch.send_at is not None or patch.timezone is not None:
        due_at, local_time = _moved(current, patch)
        edited = replace(edited, due_at=due_at, local_time=local_time)
    return replace(edited, editors=editors_after(current, edited, by))


RATE_EDITABLE = frozenset({Status.PENDING, Status.IN_PROGRESS, Status.PAUSED, Status.FINALIZING})
"""Statuses in which only the rate may change: the campaign is (or is about to be) sending."""


async def edit_scheduled(campaigns: ScheduledCampaigns, campaign_id: str, patch: CampaignPatch,
                         role: Role, by: Actor, approvals: ApprovalGate | None = None
                         ) -> Campaign | None:
    """Change the time or content of a campaign that has not fired yet (``scheduled`` or
    ``awaiting_approval``), or the rate of one that sends (``rate_per_s`` alone: senders read
    it again within ``STATUS_REFRESH_S``); None if unknown. A change of what an approval
    covers revokes it and holds the campaign ``awaiting_approval`` again
    (``domain/approval.after_edit``); ``by`` (a key of ``role``) joins its editors."""
    current = await campaigns.get(campaign_id)
    if current is None:
        return None
    if current.status in RATE_EDITABLE and patch.model_fields_set == {"rate_per_s"}:
        return await _set_rate(campaigns, current, patch.rate_per_s, role, by)
    if current.status not in EDITABLE:
        raise NotEditable(current.status)
    if current.follow_up is not None and patch.audience is not None:
        raise FollowUpAudience
    edited = _edited(current, patch, by)
    _ = edited.reach  # PurposeConflict for an audience its purpose leaves empty
    edited = await _reapproved(edited, current, approvals, utcnow(), by)
    updated = await campaigns.patch_scheduled(edited, utcnow(), was=current.status)
    if updated is None:  # it fired, was approved or cancelled between our read and our write
        latest = await campaigns.get(campaign_id)
        raise NotEditable(latest.status if latest else Status.SCHEDULED)
    return updated


async def _set_rate(campaigns: ScheduledCampaigns, current: Campaign, rate_per_s: int | None,
                    role: Role, by: Actor) -> Campaign:
    """The rate of a campaign that sends, changed; ``NotEditable`` if it stopped meanwhile.
    Above the cap an approval allowed (or uncapped), it is a new approval: only a person who
    could approve the campaign may set it (``ApprovalRefused``), and it is recorded as theirs."""
    now = utcnow()
    approvals = None
    if widens_rate(current, rate_per_s):
        refusal = widening_refusal(current, role, by)
        if refusal is not None:
            raise ApprovalRefused.of(refusal, current, by, "raising or removing its rate cap")
        widened = replace(current, rate_per_s=rate_per_s)
        approvals = (*current.approvals, approval_of(widened, by, now))
    changed = await campaigns.set_rate(current.id, rate_per_s, by, now, among=RATE_EDITABLE,
                                       approvals=approvals)
    if changed is None:
        latest = await campaigns.get(current.id)
        raise NotEditable(latest.status if latest else current.status)
    return changed


async def _reapproved(edited: Campaign, current: Campaign, approvals: ApprovalGate | None,
                      now: datetime, by: Actor) -> Campaign:
    """``edited`` with the status and approvals its changes call for."""
    if approvals is None or approvals.min_audience is None:
        return edited
    size = current.audience_estimate
    counted = size is not None and edited.audience == current.audience
    reach = edited.reach
    if reach is not None and not counted:  # changed, or never counted
        size = await approvals.size_of(reach)
    required = current.approval_required or approvals.required(size)
    status, given = after_edit(edited, required, now, by)
    if status is not current.status:
        apply(Transition.HOLD_FOR_APPROVAL, current.status)
    return replace(edited, status=status, approvals=given, approval_required=required,
                   audience_estimate=size)
