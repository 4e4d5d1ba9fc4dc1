"""Approval of large sends (``herald/domain/approval.py`` holds the rules): holding a new
campaign for one, and approving it.

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
    approval_digest,
    approval_refusal,
    approving,
    needs_approval,
)
from herald.domain.audience import Audience
from herald.domain.documents import Approval, Campaign
from herald.domain.status import Status
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import CampaignApprovals, DeviceRepository


class ApprovalRefused(Exception):
    """An approval that may not be given; ``refusal`` says why (its error code)."""

    MESSAGES = {
        Refusal.NO_SCOPE: "this key's role may not approve campaigns (campaigns:approve)",
        Refusal.OWN_CAMPAIGN: "a campaign cannot be approved with the key that created it: "
                              "ask someone else (another operator or an admin)",
        Refusal.NOT_AWAITING: "the campaign is {status}: only a campaign awaiting approval "
                              "can be approved",
        Refusal.CHANGED: "the campaign changed since you read it: read it again and approve "
                         "what it is now",
    }

    def __init__(self, refusal: Refusal, status: Status) -> None:
        super().__init__(self.MESSAGES[refusal].format(status=status.value))
        self.refusal = refusal
        self.status = status


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

    def held(self, campaign: Campaign, size: int | None) -> Campaign:
        """``campaign`` as it is created: ``awaiting_approval`` if ``size`` needs an approval."""
        if not self.required(size):
            return replace(campaign, audience_estimate=size)
        return replace(campaign, status=Status.AWAITING_APPROVAL, approval_required=True,
                       audience_estimate=size)


async def approve(campaigns: CampaignApprovals, wake_dispatcher: Callable[[str], Awaitable[None]],
                  campaign_id: str, role: Role, by: Actor,
                  seen_digest: str | None = None) -> Campaign:
    """Approve ``campaign_id`` as ``by`` (a key of ``role``): it is sent at once if due, or
    fires at its time. ``ApprovalRefused`` (nothing changed) if ``by`` may not, or the campaign
    is not awaiting approval, or it is no longer what ``by`` read."""
    campaign = await campaigns.get(campaign_id)
    if campaign is None:
        raise CampaignNotFound(campaign_id)
    refusal = approval_refusal(campaign, role, by, seen_digest)
    if refusal is not None:
        raise ApprovalRefused(refusal, campaign.status)
    now = utcnow()
    given = Approval(approval_digest(campaign), by, now)
    approved = await campaigns.approve(campaign, approving(campaign.due_at, now),
                                       (*campaign.approvals, given), now)
    if approved is None:  # approved, edited or cancelled by someone else meanwhile
        latest = await campaigns.get(campaign_id)
        status = latest.status if latest else campaign.status
        raise ApprovalRefused(Refusal.NOT_AWAITING if status is not Status.AWAITING_APPROVAL
                              else Refusal.CHANGED, status)
    if approved.status is Status.PENDING:
        await wake_dispatcher(approved.id)
    return approved
