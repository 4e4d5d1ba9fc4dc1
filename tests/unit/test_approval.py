"""Approval of large sends as pure logic (``herald/domain/approval.py``) and as a use case on the
in-memory stores (``herald/service_layer/approval.py``, the edit rules of ``campaigns.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.contracts.http import AmendRequest, CampaignPatch, DeviceIn, RetargetRequest
from herald.domain.access import Role
from herald.domain.approval import (
    Refusal,
    after_edit,
    approval_digest,
    approval_refusal,
    approving,
    is_approved,
    may_approve,
    needs_approval,
)
from herald.domain.audience import Audience
from herald.domain.documents import Approval, Campaign, CampaignContent
from herald.domain.payload import SendOptions
from herald.domain.rendering import Translation
from herald.domain.rollout import Rollout, RolloutWave
from herald.domain.status import Status, Transition
from herald.service_layer.approval import ApprovalGate, ApprovalRefused, approve
from herald.service_layer.campaigns import CampaignCreator, FollowUpAudience, edit_scheduled
from herald.service_layer.ports import Stores
from tests.factories import actor, campaign, cancelled_paged_campaign
from tests.unit.fakes import FakeBus, FakeDevices, fake_stores

CREATOR = actor("marketing")
REVIEWER = actor("reviewer")


@pytest.mark.parametrize(("size", "min_audience", "needed"), [
    (0, None, False), (1_000_000, None, False), (9, 10, False), (10, 10, True), (11, 10, True)])
def test_a_send_needs_approval_from_the_threshold_on(size: int, min_audience: int | None,
                                                     needed: bool) -> None:
    assert needs_approval(size, min_audience) is needed


@pytest.mark.parametrize(("role", "refusal"), [
    (Role.VIEWER, Refusal.NO_SCOPE), (Role.RESPONDER, Refusal.NO_SCOPE),
    (Role.INGEST, Refusal.NO_SCOPE), (Role.OPERATOR, None), (Role.ADMIN, None)])
def test_operators_and_admins_may_approve(role: Role, refusal: Refusal | None) -> None:
    assert may_approve(role, REVIEWER, CREATOR) is refusal


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ADMIN])
def test_nobody_approves_their_own_campaign_whatever_their_role(role: Role) -> None:
    assert may_approve(role, CREATOR, CREATOR) is Refusal.OWN_CAMPAIGN


def test_only_a_campaign_awaiting_approval_can_be_approved() -> None:
    for status in Status:
        held = campaign(status=status, created_by=CREATOR)
        expected = None if status is Status.AWAITING_APPROVAL else Refusal.NOT_AWAITING
        assert approval_refusal(held, Role.OPERATOR, REVIEWER, None) is expected


def test_an_approval_of_what_was_read_is_refused_once_it_changed() -> None:
    held = campaign(status=Status.AWAITING_APPROVAL, created_by=CREATOR)
    seen = approval_digest(held)
    changed = replace(held, content=replace(held.content, title="other"))
    assert approval_refusal(held, Role.OPERATOR, REVIEWER, seen) is None
    assert approval_refusal(changed, Role.OPERATOR, REVIEWER, seen) is Refusal.CHANGED


def test_the_digest_binds_content_audience_and_options_not_name_or_time() -> None:
    base = campaign()
    same = [replace(base, name="renamed"), replace(base, due_at=base.due_at + timedelta(days=1))]
    changed = [
        replace(base, content=replace(base.content, title="T2")),
        replace(base, content=replace(base.content, body="B2")),
        replace(base, content=replace(base.content, data={"landingUrl": "https://x.test"})),
        replace(base, content=replace(base.content, image_url="https://x.test/i.png")),
        replace(base, content=replace(base.content, options=SendOptions(priority="high"))),
        replace(base, audience=Audience(topics=["news"])),
        replace(base, replace_key="other-key"),
        replace(base, chunk_size=100),
        replace(base, rate_per_s=10),
        replace(base, content=replace(base.content, translations={
            "es": Translation(title="Hola", body="Estamos en vivo")})),
        replace(base, rollout=Rollout(waves=(RolloutWave(1, 60), RolloutWave(100)))),
    ]
    assert {approval_digest(c) for c in same} == {approval_digest(base)}
    digests = [approval_digest(c) for c in changed]
    assert approval_digest(base) not in digests
    assert len(set(digests)) == len(digests)


def test_an_approved_campaign_is_sent_if_due_or_waits_for_its_time() -> None:
    now = utcnow()
    assert approving(now, now) is Transition.APPROVE
    assert approving(now - timedelta(seconds=1), now) is Transition.APPROVE
    assert approving(now + timedelta(seconds=1), now) is Transition.APPROVE_FOR_LATER


def _approved(status: Status = Status.SCHEDULED) -> Campaign:
    held = campaign(status=status, created_by=CREATOR, approval_required=True)
    return replace(held, approvals=(Approval(approval_digest(held), REVIEWER, utcnow()),))


def test_an_edit_that_changes_what_was_approved_revokes_it() -> None:
    approved = _approved()
    assert is_approved(approved)
    edited = replace(approved, content=CampaignContent(title="new", body="b"))
    status, approvals = after_edit(edited, True, utcnow(), CREATOR)
    assert status is Status.AWAITING_APPROVAL
    assert approvals[-1].revoked_by == CREATOR
    moved = replace(approved, due_at=utcnow() + timedelta(hours=2))
    assert after_edit(moved, True, utcnow(), CREATOR) == (Status.SCHEDULED, moved.approvals)


def test_an_edit_of_a_campaign_that_needs_no_approval_changes_no_status() -> None:
    small = campaign(due_in_s=3600, status=Status.SCHEDULED)
    edited = replace(small, content=CampaignContent(title="new", body="b"))
    assert after_edit(edited, False, utcnow(), CREATOR) == (Status.SCHEDULED, ())


# --- the use case on the in-memory stores -----------------------------------------------------------
async def _woken(stores: Stores) -> tuple[list[str], Callable[[str], Awaitable[None]]]:
    woken: list[str] = []

    async def wake(campaign_id: str) -> None:
        woken.append(campaign_id)
    return woken, wake


async def test_approving_a_due_campaign_wakes_a_dispatcher_and_records_who() -> None:
    stores = fake_stores()
    held = campaign(status=Status.AWAITING_APPROVAL, created_by=CREATOR)
    await stores.campaigns.insert(held)
    woken, wake = await _woken(stores)
    approved = await approve(stores.campaigns, wake, held.id, Role.OPERATOR, REVIEWER)
    assert approved.status is Status.PENDING
    assert approved.approval is not None and approved.approval.by == REVIEWER
    assert woken == [held.id]


async def test_a_refused_approval_changes_nothing() -> None:
    stores = fake_stores()
    held = campaign(status=Status.AWAITING_APPROVAL, created_by=CREATOR)
    await stores.campaigns.insert(held)
    woken, wake = await _woken(stores)
    with pytest.raises(ApprovalRefused) as refused:
        await approve(stores.campaigns, wake, held.id, Role.ADMIN, CREATOR)
    assert refused.value.refusal is Refusal.OWN_CAMPAIGN
    assert await stores.campaigns.get(held.id) == held
    assert woken == []


async def test_an_edit_between_the_read_and_the_write_of_an_approval_wins() -> None:
    stores = fake_stores()
    held = campaign(due_in_s=3600, status=Status.AWAITING_APPROVAL, created_by=CREATOR,
                    approval_required=True)
    await stores.campaigns.insert(held)
    gate = ApprovalGate(FakeDevices(), 1)
    await edit_scheduled(stores.campaigns, held.id, CampaignPatch(title="changed"), CREATOR,
                         approvals=gate)
    stale = await stores.campaigns.approve(held, Transition.APPROVE_FOR_LATER, (), utcnow())
    assert stale is None  # the approval read revision 0; the edit made it 1


async def test_a_large_follow_up_waits_for_approval_and_wakes_no_dispatcher() -> None:
    stores, bus = fake_stores(), FakeBus()
    original = await cancelled_paged_campaign(stores)  # 12 sent, 17 unsent
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus,
                              ApprovalGate(stores.devices, 13))
    retarget = await creator.retarget(original.id, RetargetRequest(), CREATOR)
    amend = await creator.amend(original.id, AmendRequest(), CREATOR)
    assert retarget is not None and amend is not None
    assert (retarget.status, retarget.audience_estimate) == (Status.AWAITING_APPROVAL, 17)
    assert (amend.status, amend.audience_estimate) == (Status.PENDING, 12)
    assert bus.dispatches == [amend.id]
    with pytest.raises(FollowUpAudience):
        await edit_scheduled(stores.campaigns, retarget.id, CampaignPatch(audience=Audience()),
                             CREATOR, approvals=ApprovalGate(stores.devices, 13))


async def test_a_campaign_never_counted_is_counted_at_its_first_edit() -> None:
    stores = fake_stores()
    await stores.devices.upsert([DeviceIn(token=f"tok-{i}", platform="ios") for i in range(3)],
                                utcnow())
    uncounted = campaign(due_in_s=3600, status=Status.SCHEDULED, created_by=CREATOR)
    await stores.campaigns.insert(uncounted)  # made while approvals were off
    edited = await edit_scheduled(stores.campaigns, uncounted.id, CampaignPatch(name="n"),
                                  CREATOR, approvals=ApprovalGate(stores.devices, 3))
    assert edited is not None
    assert (edited.status, edited.audience_estimate) == (Status.AWAITING_APPROVAL, 3)
