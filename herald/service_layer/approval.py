"""Approval of large sends (``herald/domain/approval.py`` holds the rules): holding a new
campaign for one, approving it, and guarding what would widen it once approved.

The one decider of an approval is ``approve``: a conditional write of the approval and the
status (``awaiting_approval → pending`` when due, ``→ scheduled`` when not) that holds only at
the revision the approver's request read, so an edit racing it wins or loses whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from herald.clock import utcnow
from herald.domain.access import Actor, Role
from herald.domain.approval import (
    Refusal,
    approval_of,
    approval_refusal,
    approving,
    is_approved,
    needs_approval,
    own_part,
    skips_hold,
    widening_refusal,
)
from herald.domain.audience import Audience
from herald.domain.documents import Campaign
from herald.domain.status import Status
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import CampaignApprovals, CampaignLookup, DeviceRepository


class ApprovalRefused(Exception):
    """An approval (or a change that needs one) that may not be given; ``refusal`` says why
    (its error code)."""

    MESSAGES = {
        Refusal.NO_SCOPE: "this key's role may not approve campaigns (campaigns:approve)",
        Refusal.OWN_CAMPAIGN: "{person} {part}: a campaign is approved by a person other than "
                              "whoever created it or changed it since its last approval (a "
                              "person's keys are one person); ask someone else",
        Refusal.NOT_AWAITING: "the campaign is {status}: only a campaign awaiting approval "
                              "can be approved",
        Refusal.CHANGED: "the campaign changed since you read it: read it again and approve "
                         "what it is now",
        Refusal.NEEDS_APPROVAL: "{what} goes beyond what was approved and needs a new "
                                "approval: only a person who could approve the campaign may "
                                "do it, and {person} {part}",
    }

    def __init__(self, refusal: Refusal, status: Status, *, person: str = "",
                 part: str = "", what: str = "") -> None:
        super().__init__(self.MESSAGES[refusal].format(
            status=status.value, person=person, part=part, what=what))
        self.refusal = refusal
        self.status = status

    @classmethod
    def of(cls, refusal: Refusal, campaign: Campaign, by: Actor,
           what: str = "") -> ApprovalRefused:
        """``refusal`` of ``by`` for ``campaign``, naming what ``by``'s person did to it."""
        part = own_part(campaign, by) or "may not approve it"
        return cls(refusal, campaign.status, person=f"you ({by.person})", part=part, what=what)


@dataclass(frozen=True)
class ApprovalGate:
    """Whether a send is large enough to wait for an approval (``HERALD_APPROVAL_MIN_AUDIENCE``:
    None, no approval ever)."""

    devices: DeviceRepository
    min_audience: int | None

    async def size_of(self, audience: Audience) -> int | None:
        """The devices ``audience`` selects now; None when no approval is configured (nothing
        is counted then)."""
        return None if self.min_audience is None else await self.devices.count(audience)

    def required(self, size: int | None) -> bool:
        return size is not None and needs_approval(size, self.min_audience)

    def held(self, campaign: Campaign, size: int | None, together: int | None = None
             ) -> Campaign:
        """``campaign`` as it is created: ``awaiting_approval`` if it needs an approval. It
        reaches ``size`` devices; ``together`` (if given) is what it sends together with other
        sends that need no approval of their own, and is what the threshold judges."""
        if not self.required(size if together is None else together):
            return replace(campaign, audience_estimate=size)
        return replace(campaign, status=Status.AWAITING_APPROVAL, approval_required=True,
                       audience_estimate=size)

    async def unapproved_size_at_its_time(self, campaign: Campaign) -> int | None:
        """Its audience counted again as it falls due: the count if that needs an approval it
        does not have (an audience grows between creation and its time), else None."""
        reach = campaign.reach
        if self.min_audience is None or reach is None or is_approved(campaign):
            return None
        size = await self.size_of(reach)
        return size if self.required(size) else None


async def approve(campaigns: CampaignApprovals, wake_dispatcher: Callable[[str], Awaitable[None]],
                  campaign_id: str, role: Role, by: Actor, seen_digest: str) -> Campaign:
    """Approve ``campaign_id`` as ``by`` (a key of ``role``), as they read it (``seen_digest``,
    the ``content_digest`` they were shown): it is sent at once if due, or fires at its time.
    ``ApprovalRefused`` (nothing changed) if ``by``'s person may not, or the campaign is not
    awaiting approval, or it is no longer what ``by`` read."""
    campaign = await campaigns.get(campaign_id)
    if campaign is None:
        raise CampaignNotFound(campaign_id)
    refusal = approval_refusal(campaign, role, by, seen_digest)
    if refusal is not None:
        raise ApprovalRefused.of(refusal, campaign, by)
    now = utcnow()
    approved = await campaigns.approve(campaign, approving(campaign.due_at, now),
                                       (*campaign.approvals, approval_of(campaign, by, now)), now)
    if approved is None:  # approved, edited or cancelled by someone else meanwhile
        latest = await campaigns.get(campaign_id)
        status = latest.status if latest else campaign.status
        raise ApprovalRefused(Refusal.NOT_AWAITING if status is not Status.AWAITING_APPROVAL
                              else Refusal.CHANGED, status)
    if approved.status is Status.PENDING:
        await wake_dispatcher(approved.id)
    return approved


async def resume_within_approval(campaigns: CampaignLookup,
                                 resume: Callable[[str, Actor | None], Awaitable[Campaign]],
                                 campaign_id: str, role: Role, by: Actor) -> Campaign:
    """``resume`` (the stopping protocol's), unless it would skip a staged rollout's hold of a
    campaign that was approved and ``by``'s person could not approve it (``ApprovalRefused``,
    nothing changed): skipping a hold sends sooner than the approver agreed to."""
    campaign = await campaigns.get(campaign_id)
    if campaign is None:
        raise CampaignNotFound(campaign_id)
    if campaign.approval_required and skips_hold(campaign, utcnow()):
        refusal = widening_refusal(campaign, role, by)
        if refusal is not None:
            raise ApprovalRefused.of(refusal, campaign, by,
                                     "a resume that skips a staged rollout's hold")
    return await resume(campaign_id, by)
