"""Approval of large sends: when a campaign needs one, who may give it, and what it is bound to.

With ``HERALD_APPROVAL_MIN_AUDIENCE`` set, a campaign (or a schedule's run, or a follow-up) that
would reach at least that many devices waits ``awaiting_approval`` and sends nothing until a
*person* other than those who made it, holding ``campaigns:approve``, approves it:

- **People, not keys.** Every key belongs to a person (``ApiKey.owner``); the keys of one
  person are one person here (``Actor.person``).
- **Who may not.** Whoever created it, and whoever changed what the approval covers since its
  last approval (``Campaign.editors``; for a schedule's run, also whoever wrote its template).
- **What it is bound to.** A digest of the content, the audience (or the follow-up's source)
  and the options, and limits (``ApprovedLimits``): the rate cap and the earliest time approved.
  A change within them (a lower cap, a later time, a new name) keeps the approval; a change of
  what the digest covers, or beyond the limits (a higher or no cap, an earlier time), needs a
  new one, and so does skipping a staged rollout's hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from herald.domain.access import Actor, Role, Scope, allows
from herald.domain.documents import Approval, ApprovedLimits, Campaign
from herald.domain.status import Status, Transition


def needs_approval(audience_size: int, min_audience: int | None) -> bool:
    """Whether a send to ``audience_size`` devices waits for an approval (None: never)."""
    return min_audience is not None and audience_size >= min_audience


def approval_digest(campaign: Campaign) -> str:
    """SHA-256 of what an approval is bound to: content (title, body, data, image, options,
    translations), audience or follow-up source, purpose (who the audience reaches), replacement
    key, chunk size, rate cap and staged rollout; not the name or the time. A campaign stored
    before purposes digests as it did then."""
    content = campaign.content
    bound: dict[str, Any] = {
        "title": content.title, "body": content.body, "data": content.data,
        "image_url": content.image_url,
        "translations": {tag: translation.model_dump(mode="json")
                         for tag, translation in content.translations.items()},
        "rollout": asdict(campaign.rollout) if campaign.rollout else None,
        "options": content.options.model_dump(mode="json") if content.options else None,
        "audience": campaign.audience.model_dump(mode="json") if campaign.audience else None,
        "follow_up": asdict(campaign.follow_up) if campaign.follow_up else None,
        "replace_key": campaign.sent_with_key, "chunk_size": campaign.chunk_size,
        "rate_per_s": campaign.rate_per_s}
    if campaign.purpose is not None:
        bound["purpose"] = campaign.purpose.value
    return hashlib.sha256(orjson.dumps(bound, option=orjson.OPT_SORT_KEYS)).hexdigest()


class Refusal(StrEnum):
    """Why an approval (or a change that needs one) is refused; each is its error code."""

    NO_SCOPE = "forbidden"  # the key's role does not hold campaigns:approve
    OWN_CAMPAIGN = "self_approval"  # its creator's or an editor's person: four eyes, not two
    NOT_AWAITING = "not_awaiting_approval"  # nothing to approve in this status
    CHANGED = "approval_stale"  # the campaign changed since the approver read it
    NEEDS_APPROVAL = "approval_required"  # a change that widens an approved send


# --- people ---------------------------------------------------------------------------------
def with_person(actors: tuple[Actor, ...], actor: Actor) -> tuple[Actor, ...]:
    """``actors`` with ``actor`` added, unless one of the same person is there already."""
    return actors if any(a.person == actor.person for a in actors) else (*actors, actor)


def own_part(campaign: Campaign, approver: Actor) -> str | None:
    """What ``approver``'s person did that bars them from approving ``campaign`` (None:
    nothing): created it (or its schedule), or changed it (or its schedule's template) since
    its last approval."""
    creator = campaign.created_by
    run = campaign.schedule_id is not None and campaign.run_key is not None
    if creator is not None and creator.person == approver.person:
        return "created its schedule" if run else "created it"
    if any(editor.person == approver.person for editor in campaign.editors):
        return ("changed it or its schedule's template since its last approval" if run
                else "changed it since its last approval")
    return None


def may_approve(role: Role, approver: Actor, campaign: Campaign) -> Refusal | None:
    """None if ``approver`` (holding ``role``) may approve ``campaign`` as far as people go."""
    if not allows(role, Scope.CAMPAIGNS_APPROVE):
        return Refusal.NO_SCOPE
    if own_part(campaign, approver) is not None:
        return Refusal.OWN_CAMPAIGN
    return None


def approval_refusal(campaign: Campaign, role: Role, approver: Actor,
                     seen_digest: str) -> Refusal | None:
    """None if ``approver`` may approve ``campaign`` now, as the approver read it (the
    ``seen_digest`` of what they were shown)."""
    refusal = may_approve(role, approver, campaign)
    if refusal is not None:
        return refusal
    if campaign.status is not Status.AWAITING_APPROVAL:
        return Refusal.NOT_AWAITING
    if seen_digest != approval_digest(campaign):
        return Refusal.CHANGED
    return None


def approving(due_at: datetime, now: datetime) -> Transition:
    """Where an approved campaign goes: ``pending`` if it is due, else ``scheduled``."""
    return Transition.APPROVE if due_at <= now else Transition.APPROVE_FOR_LATER


def approval_of(campaign: Campaign, by: Actor, now: datetime) -> Approval:
    """``by``'s approval of ``campaign`` as it is: its digest, its rate cap and its time."""
    return Approval(approval_digest(campaign), by, now,
                    limits=ApprovedLimits(campaign.rate_per_s, campaign.due_at))


# --- what an approval covers ------------------------------------------------------------------
def faster(rate_per_s: int | None, than: int | None) -> bool:
    """Whether the cap ``rate_per_s`` lets more through than the cap ``than`` (None: none)."""
    return than is not None and (rate_per_s is None or rate_per_s > than)


def covers(approval: Approval, campaign: Campaign) -> bool:
    """Whether ``approval`` still covers ``campaign``: the same digest, once the rate is put
    back as approved, and within the approved limits (no faster, no sooner)."""
    limits = approval.limits
    if limits is None:  # given before limits were recorded: the digest alone binds
        return approval.digest == approval_digest(campaign)
    as_approved = replace(campaign, rate_per_s=limits.rate_per_s)
    return (approval.digest == approval_digest(as_approved)
            and not faster(campaign.rate_per_s, limits.rate_per_s)
            and campaign.due_at >= limits.due_at)


def is_approved(campaign: Campaign) -> bool:
    """Whether the campaign's current approval covers what it would send now."""
    approval = campaign.approval
    return approval is not None and covers(approval, campaign)


def editors_after(current: Campaign, edited: Campaign, by: Actor) -> tuple[Actor, ...]:
    """The editors of ``edited``: ``by`` joins them if the edit changed anything an approval
    covers (anything but the name)."""
    changed = (approval_digest(edited) != approval_digest(current)
               or edited.due_at != current.due_at)
    return with_person(current.editors, by) if changed else current.editors


def after_edit(edited: Campaign, required: bool, now: datetime, by: Actor
               ) -> tuple[Status, tuple[Approval, ...]]:
    """The status and approvals of a campaign edited while ``scheduled`` or ``awaiting_approval``.

    - Not ``required`` (small enough, or approval not configured): the status stays as it is
      (an ``awaiting_approval`` campaign stays so until someone approves or cancels it).
    - Required and still covered by its approval (the name changed, the rate cap was lowered,
      the time moved later): unchanged.
    - Required and not covered: the approval is revoked and it waits for a new one
      (``scheduled`` → ``awaiting_approval``).
    """
    approvals = edited.approvals
    if not required or is_approved(edited):
        return edited.status, approvals
    current = edited.approval
    if current is not None:
        approvals = (*approvals[:-1], current.revoked(now, by))
    return Status.AWAITING_APPROVAL, approvals


# --- widening a send that was approved --------------------------------------------------------
def approved_rate(campaign: Campaign) -> int | None:
    """The rate cap its approval allows (an approval without limits: the cap it has now)."""
    approval = campaign.approval
    limits = approval.limits if approval is not None else None
    return limits.rate_per_s if limits is not None else campaign.rate_per_s


def widens_rate(campaign: Campaign, rate_per_s: int | None) -> bool:
    """Whether capping ``campaign`` at ``rate_per_s`` goes beyond what was approved."""
    return campaign.approval_required and faster(rate_per_s, approved_rate(campaign))


def skips_hold(campaign: Campaign, now: datetime) -> bool:
    """Whether a resume of ``campaign`` would start a staged rollout's next wave before its
    hold is over: held between waves while sending (a resume of one sending otherwise is
    refused anyway), or paused with its hold not over."""
    rollout, progress = campaign.rollout, campaign.rollout_progress
    if rollout is None or progress is None or progress.wave >= rollout.last_wave:
        return False
    if campaign.status is Status.IN_PROGRESS:
        return True
    return progress.hold_until is not None and progress.hold_until > now


def widening_refusal(campaign: Campaign, role: Role, by: Actor) -> Refusal | None:
    """None if ``by`` may widen an approved ``campaign`` (someone who could approve it: the
    widening is then their approval); else ``NEEDS_APPROVAL``."""
    return Refusal.NEEDS_APPROVAL if may_approve(role, by, campaign) is not None else None


def unapproved_reach(follow_ups: Iterable[Campaign]) -> int:
    """How many recipients follow-ups of one original reach without an approval: each one
    that never needed one, unless cancelled before it started."""
    return sum(f.audience_estimate or 0 for f in follow_ups
               if not f.approval_required and f.approval is None
               and not (f.status is Status.CANCELLED and not f.dispatch.started))
