"""Approval of large sends: when a campaign needs one, who may give it, and what it is bound to.

With ``HERALD_APPROVAL_MIN_AUDIENCE`` set, a campaign (or a schedule's run, or a follow-up) that
would reach at least that many devices is created ``awaiting_approval`` and sends nothing until a
key other than its creator's, holding ``campaigns:approve``, approves it. The approval is bound to
what was approved: a digest of the content, the audience (or the follow-up's source) and the
options. An edit that changes the digest revokes it; moving the time does not.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from herald.domain.access import Actor, Role, Scope, allows
from herald.domain.documents import Approval, Campaign
from herald.domain.status import Status, Transition


def needs_approval(audience_size: int, min_audience: int | None) -> bool:
    """Whether a send to ``audience_size`` devices waits for an approval (None: never)."""
    return min_audience is not None and audience_size >= min_audience


def approval_digest(campaign: Campaign) -> str:
    """SHA-256 of what an approval is bound to: content (title, body, data, image, options,
    translations), audience or follow-up source, replacement key, chunk size, rate cap and
    staged rollout; not the name or the time."""
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
    return hashlib.sha256(orjson.dumps(bound, option=orjson.OPT_SORT_KEYS)).hexdigest()


class Refusal(StrEnum):
    """Why an approval is refused (each answered with its own JSON error code)."""

    NO_SCOPE = "forbidden"  # the key's role does not hold campaigns:approve
    OWN_CAMPAIGN = "self_approval"  # the creator's own key: four eyes, not two
    NOT_AWAITING = "not_awaiting_approval"  # nothing to approve in this status
    CHANGED = "approval_stale"  # the campaign changed since the approver read it


def may_approve(role: Role, approver: Actor, creator: Actor | None) -> Refusal | None:
    """None if ``approver`` (holding ``role``) may approve a campaign made by ``creator``."""
    if not allows(role, Scope.CAMPAIGNS_APPROVE):
        return Refusal.NO_SCOPE
    if creator is not None and creator.id == approver.id:
        return Refusal.OWN_CAMPAIGN
    return None


def approval_refusal(campaign: Campaign, role: Role, approver: Actor,
                     seen_digest: str | None) -> Refusal | None:
    """None if ``approver`` may approve ``campaign`` now, as it is (and, if the approver names
    the digest it read, as it was read)."""
    refusal = may_approve(role, approver, campaign.created_by)
    if refusal is not None:
        return refusal
    if campaign.status is not Status.AWAITING_APPROVAL:
        return Refusal.NOT_AWAITING
    if seen_digest is not None and seen_digest != approval_digest(campaign):
        return Refusal.CHANGED
    return None


def approving(due_at: datetime, now: datetime) -> Transition:
    """Where an approved campaign goes: ``pending`` if it is due, else ``scheduled``."""
    return Transition.APPROVE if due_at <= now else Transition.APPROVE_FOR_LATER


def is_approved(campaign: Campaign) -> bool:
    """Whether the campaign's current approval covers what it would send now."""
    approval = campaign.approval
    return approval is not None and approval.digest == approval_digest(campaign)


def after_edit(edited: Campaign, required: bool, now: datetime, by: Actor
               ) -> tuple[Status, tuple[Approval, ...]]:
    """The status and approvals of a campaign edited while ``scheduled`` or ``awaiting_approval``.

    - Not ``required`` (small enough, or approval not configured): the status stays as it is
      (an ``awaiting_approval`` campaign stays so until someone approves or cancels it).
    - Required and still covered by its approval (only the name or time changed): unchanged.
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
