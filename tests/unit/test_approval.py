"""Approval of large sends as pure logic (``herald/domain/approval.py``) and as a use case on the
in-memory stores (``herald/service_layer/approval.py``, the edit rules of ``campaigns.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.contracts.http import AmendRequest, CampaignPatch, DeviceIn, RetargetRequest
from herald.domain.access import Actor, ActorKind, ApiKey, Role
from herald.domain.approval import (
    Refusal,
    after_edit,
    approval_digest,
    approval_of,
    approval_refusal,
    approving,
    covers,
    editors_after,
    is_approved,
    may_approve,
    needs_approval,
    own_part,
    skips_hold,
    unapproved_reach,
    widens_rate,
)
from herald.domain.audience import Audience
from herald.domain.documents import Approval, Campaign, CampaignContent, FollowUp, FollowUpOf
from herald.domain.payload import SendOptions
from herald.domain.purpose import Purpose
from herald.domain.rendering import Translation
from herald.domain.rollout import Rollout, RolloutProgress, RolloutWave
from herald.domain.status import Status, Transition
from herald.service_layer.access import mint_key
from herald.service_layer.approval import (
    ApprovalGate,
    ApprovalRefused,
    approve,
    resume_within_approval,
)
from herald.service_layer.campaigns import (
    CampaignCreator,
    FollowUpAudience,
    edit_scheduled,
)
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


def key_of(name: str, owner: str | None) -> Actor:
    """The actor of a key named ``name`` that belongs to ``owner``."""
    return Actor(id=f"id-{name}", name=name, kind=ActorKind.API_KEY, owner=owner)


@pytest.mark.parametrize(("role", "refusal"), [
    (Role.VIEWER, Refusal.NO_SCOPE), (Role.RESPONDER, Refusal.NO_SCOPE),
    (Role.INGEST, Refusal.NO_SCOPE), (Role.OPERATOR, None), (Role.ADMIN, None)])
def test_operators_and_admins_may_approve(role: Role, refusal: Refusal | None) -> None:
    assert may_approve(role, REVIEWER, campaign(created_by=CREATOR)) is refusal


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ADMIN])
def test_nobody_approves_their_own_campaign_whatever_their_role(role: Role) -> None:
    assert may_approve(role, CREATOR, campaign(created_by=CREATOR)) is Refusal.OWN_CAMPAIGN


def test_the_keys_of_one_person_are_one_person() -> None:
    made = campaign(created_by=key_of("alice-laptop", "alice"))
    assert may_approve(Role.ADMIN, key_of("alice-ci", "alice"), made) is Refusal.OWN_CAMPAIGN
    assert own_part(made, key_of("alice-ci", "alice")) == "created it"
    assert may_approve(Role.OPERATOR, key_of("bob", "bob"), made) is None


def test_a_key_without_an_owner_is_a_person_of_its_own() -> None:
    legacy = Actor(id="6b01", name="old", kind=ActorKind.API_KEY)  # recorded before owners
    assert legacy.person == "6b01"
    key = ApiKey(id="6b01", name="old", role=Role.OPERATOR, secret_hash="h",
                 created_at=utcnow())
    assert (key.person, key.as_actor().person) == ("6b01", "6b01")
    assert may_approve(Role.OPERATOR, key.as_actor(), campaign(created_by=legacy)) \
        is Refusal.OWN_CAMPAIGN


async def test_a_key_minted_for_nobody_is_its_minter_s_and_one_for_someone_is_theirs() -> None:
    stores = fake_stores()
    admin = key_of("root", "carol")
    own = await mint_key(stores.api_keys, "spare", Role.OPERATOR, None, admin)
    theirs = await mint_key(stores.api_keys, "dave", Role.OPERATOR, None, admin, "dave")
    assert (own.key.person, theirs.key.person) == ("carol", "dave")
    assert own.key.as_actor().owner == "carol"


def test_whoever_changed_it_since_its_last_approval_may_not_approve_it() -> None:
    editor = key_of("editor", "erin")
    held = campaign(status=Status.AWAITING_APPROVAL, created_by=CREATOR, editors=(editor,))
    assert may_approve(Role.OPERATOR, key_of("erin-2", "erin"), held) is Refusal.OWN_CAMPAIGN
    assert own_part(held, editor) == "changed it since its last approval"
    run = replace(held, schedule_id="s1", run_key="s1:t")
    assert own_part(run, editor) == "changed it or its schedule's template since its last approval"
    assert own_part(run, CREATOR) == "created its schedule"


def test_an_editor_is_whoever_changed_what_an_approval_covers_once_per_person() -> None:
    current = campaign(due_in_s=3600, status=Status.SCHEDULED, created_by=CREATOR)
    erin, erin_again = key_of("erin", "erin"), key_of("erin-2", "erin")
    renamed = replace(current, name="other")
    retitled = replace(current, content=replace(current.content, title="other"))
    moved = replace(current, due_at=current.due_at + timedelta(hours=1))
    assert editors_after(current, renamed, erin) == ()
    assert editors_after(current, retitled, erin) == (erin,)
    assert editors_after(current, moved, erin) == (erin,)
    twice = replace(retitled, editors=(erin,))
    rebodied = replace(twice, content=replace(twice.content, body="x"))
    assert editors_after(twice, rebodied, erin_again) == (erin,)


def test_only_a_campaign_awaiting_approval_can_be_approved() -> None:
    for status in Status:
        held = campaign(status=status, created_by=CREATOR)
        expected = None if status is Status.AWAITING_APPROVAL else Refusal.NOT_AWAITING
        assert approval_refusal(held, Role.OPERATOR, REVIEWER,
                                approval_digest(held)) is expected


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
        replace(base, purpose=Purpose.TRANSACTIONAL),
        replace(base, purpose=Purpose.MARKETING),
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


def _approved(status: Status = Status.SCHEDULED, **changes: object) -> Campaign:
    held = campaign(3600, status=status, created_by=CREATOR, approval_required=True,
                    rate_per_s=100, **changes)
    return replace(held, approvals=(approval_of(held, REVIEWER, utcnow()),))


def test_an_edit_that_changes_what_was_approved_revokes_it() -> None:
    approved = _approved()
    assert is_approved(approved)
    edited = replace(approved, content=CampaignContent(title="new", body="b"))
    status, approvals = after_edit(edited, True, utcnow(), CREATOR)
    assert status is Status.AWAITING_APPROVAL
    assert approvals[-1].revoked_by == CREATOR
    moved = replace(approved, due_at=approved.due_at + timedelta(hours=2))
    assert after_edit(moved, True, utcnow(), CREATOR) == (Status.SCHEDULED, moved.approvals)


@pytest.mark.parametrize(("change", "kept"), [
    ({"rate_per_s": 10}, True), ({"rate_per_s": 100}, True), ({"rate_per_s": 101}, False),
    ({"rate_per_s": None}, False), ({"name": "renamed"}, True),
    ({"due_at": timedelta(hours=1)}, True), ({"due_at": -timedelta(minutes=1)}, False),
    ({"audience": Audience(topics=["more"])}, False)])
def test_an_approval_covers_narrower_changes_and_not_wider_ones(change: dict[str, object],
                                                               kept: bool) -> None:
    approved = _approved()
    shift = change.get("due_at")
    if isinstance(shift, timedelta):
        change = {"due_at": approved.due_at + shift}
    edited = replace(approved, **change)  # type: ignore[arg-type]
    assert is_approved(edited) is kept
    status, _ = after_edit(edited, True, utcnow(), CREATOR)
    assert status is (Status.SCHEDULED if kept else Status.AWAITING_APPROVAL)


def test_an_approval_given_before_limits_were_recorded_binds_by_its_digest_alone() -> None:
    held = campaign(3600, status=Status.SCHEDULED, rate_per_s=100)
    legacy = Approval(approval_digest(held), REVIEWER, utcnow())
    assert covers(legacy, replace(held, due_at=held.due_at - timedelta(minutes=5)))
    assert not covers(legacy, replace(held, rate_per_s=10))


def test_a_rate_cap_widens_an_approved_send_only_beyond_the_approved_cap() -> None:
    approved = _approved(Status.IN_PROGRESS)
    assert [widens_rate(approved, rate) for rate in (50, 100, 101, None)] == [
        False, False, True, True]
    assert not widens_rate(replace(approved, approval_required=False), None)
    uncapped = replace(approved, approvals=(approval_of(replace(approved, rate_per_s=None),
                                                        REVIEWER, utcnow()),))
    assert not widens_rate(uncapped, None)


def _rolling(status: Status, wave: int, hold_s: float | None) -> Campaign:
    hold_until = None if hold_s is None else utcnow() + timedelta(seconds=hold_s)
    return campaign(status=status, rollout=Rollout(waves=(
        RolloutWave(10, 3600), RolloutWave(50, 3600), RolloutWave(100))),
        rollout_progress=RolloutProgress(wave=wave, hold_until=hold_until))


@pytest.mark.parametrize(("status", "wave", "hold_s", "skips"), [
    (Status.IN_PROGRESS, 0, 3600, True), (Status.IN_PROGRESS, 0, None, True),
    (Status.IN_PROGRESS, 2, None, False), (Status.PAUSED, 1, 3600, True),
    (Status.PAUSED, 1, -1, False), (Status.PAUSED, 1, None, False)])
def test_a_resume_skips_a_hold_while_one_is_ahead_and_not_over(
        status: Status, wave: int, hold_s: float | None, skips: bool) -> None:
    assert skips_hold(_rolling(status, wave, hold_s), utcnow()) is skips
    assert not skips_hold(campaign(status=status), utcnow())


def test_what_follow_ups_reach_without_approval_is_added_up() -> None:
    unapproved = campaign(audience_estimate=45, follow_up=FollowUp("o", FollowUpOf.UNSENT))
    held = replace(unapproved, approval_required=True, status=Status.AWAITING_APPROVAL)
    stopped_early = replace(unapproved, status=Status.CANCELLED)
    assert unapproved_reach([unapproved, held, stopped_early, unapproved]) == 90


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
    approved = await approve(stores.campaigns, wake, held.id, Role.OPERATOR, REVIEWER,
                             approval_digest(held))
    assert approved.status is Status.PENDING
    assert approved.approval is not None and approved.approval.by == REVIEWER
    assert woken == [held.id]


async def test_a_refused_approval_changes_nothing() -> None:
    stores = fake_stores()
    held = campaign(status=Status.AWAITING_APPROVAL, created_by=CREATOR)
    await stores.campaigns.insert(held)
    woken, wake = await _woken(stores)
    with pytest.raises(ApprovalRefused) as refused:
        await approve(stores.campaigns, wake, held.id, Role.ADMIN, CREATOR, approval_digest(held))
    assert refused.value.refusal is Refusal.OWN_CAMPAIGN
    assert "created it" in str(refused.value)
    assert await stores.campaigns.get(held.id) == held
    assert woken == []


async def test_an_edit_between_the_read_and_the_write_of_an_approval_wins() -> None:
    stores = fake_stores()
    held = campaign(due_in_s=3600, status=Status.AWAITING_APPROVAL, created_by=CREATOR,
                    approval_required=True)
    await stores.campaigns.insert(held)
    gate = ApprovalGate(FakeDevices(), 1)
    await edit_scheduled(stores.campaigns, held.id, CampaignPatch(title="changed"),
                         Role.OPERATOR, CREATOR, approvals=gate)
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
                             Role.OPERATOR, CREATOR, approvals=ApprovalGate(stores.devices, 13))


async def test_a_campaign_never_counted_is_counted_at_its_first_edit() -> None:
    stores = fake_stores()
    await stores.devices.upsert([DeviceIn(token=f"tok-{i}", platform="ios") for i in range(3)],
                                utcnow())
    uncounted = campaign(due_in_s=3600, status=Status.SCHEDULED, created_by=CREATOR)
    await stores.campaigns.insert(uncounted)  # made while approvals were off
    edited = await edit_scheduled(stores.campaigns, uncounted.id, CampaignPatch(name="n"),
                                  Role.OPERATOR, CREATOR, approvals=ApprovalGate(stores.devices, 3))
    assert edited is not None
    assert (edited.status, edited.audience_estimate) == (Status.AWAITING_APPROVAL, 3)


async def test_an_editor_may_approve_again_once_someone_else_approved_their_edit() -> None:
    stores, gate = fake_stores(), ApprovalGate(FakeDevices(), 1)
    erin, frank = key_of("erin", "erin"), key_of("frank", "frank")
    held = campaign(due_in_s=3600, status=Status.AWAITING_APPROVAL, created_by=CREATOR,
                    approval_required=True)
    await stores.campaigns.insert(held)
    _, wake = await _woken(stores)
    edited = await edit_scheduled(stores.campaigns, held.id, CampaignPatch(title="Erin's"),
                                  Role.OPERATOR, erin, approvals=gate)
    assert edited is not None and edited.editors == (erin,)
    with pytest.raises(ApprovalRefused) as refused:
        await approve(stores.campaigns, wake, held.id, Role.OPERATOR, erin,
                      approval_digest(edited))
    assert "changed it since its last approval" in str(refused.value)
    approved = await approve(stores.campaigns, wake, held.id, Role.OPERATOR, frank,
                             approval_digest(edited))
    assert (approved.status, approved.editors) == (Status.SCHEDULED, ())
    again = await edit_scheduled(stores.campaigns, held.id, CampaignPatch(body="again"),
                                 Role.OPERATOR, CREATOR, approvals=gate)
    assert again is not None and again.status is Status.AWAITING_APPROVAL
    assert (await approve(stores.campaigns, wake, held.id, Role.OPERATOR, erin,
                          approval_digest(again))).status is Status.SCHEDULED


async def test_a_rate_above_the_approved_one_is_refused_to_its_creator_and_is_a_new_approval(
        ) -> None:
    stores = fake_stores()
    sending = _approved(Status.IN_PROGRESS)
    await stores.campaigns.insert(sending)
    raise_it = CampaignPatch.model_validate({"rate_per_s": None})
    with pytest.raises(ApprovalRefused) as refused:
        await edit_scheduled(stores.campaigns, sending.id, raise_it, Role.ADMIN, CREATOR)
    assert refused.value.refusal is Refusal.NEEDS_APPROVAL
    assert "created it" in str(refused.value)
    assert await stores.campaigns.get(sending.id) == sending
    slower = await edit_scheduled(stores.campaigns, sending.id, CampaignPatch(rate_per_s=20),
                                  Role.OPERATOR, CREATOR)
    assert slower is not None and slower.approvals == sending.approvals
    frank = key_of("frank", "frank")
    faster = await edit_scheduled(stores.campaigns, sending.id, raise_it, Role.OPERATOR, frank)
    assert faster is not None and faster.rate_per_s is None
    assert faster.approval is not None and faster.approval.by == frank
    assert faster.approval.digest == approval_digest(faster)


async def test_a_resume_that_skips_an_approved_hold_needs_a_person_who_could_approve_it(
        ) -> None:
    stores = fake_stores()
    holding = replace(_rolling(Status.IN_PROGRESS, 0, 3600), created_by=CREATOR,
                      approval_required=True)
    await stores.campaigns.insert(holding)
    resumed: list[str] = []

    async def resume(campaign_id: str, by: Actor | None) -> Campaign:
        resumed.append(campaign_id)
        return holding

    with pytest.raises(ApprovalRefused) as refused:
        await resume_within_approval(stores.campaigns, resume, holding.id, Role.OPERATOR,
                                     CREATOR)
    assert refused.value.refusal is Refusal.NEEDS_APPROVAL and resumed == []
    await resume_within_approval(stores.campaigns, resume, holding.id, Role.OPERATOR,
                                 key_of("frank", "frank"))
    small = replace(holding, id="6b00000000000000000000ff", approval_required=False)
    await stores.campaigns.insert(small)
    await resume_within_approval(stores.campaigns, resume, small.id, Role.OPERATOR, CREATOR)
    assert resumed == [holding.id, small.id]


async def test_a_correction_is_judged_on_both_halves_together() -> None:
    stores, bus = fake_stores(), FakeBus()
    original = await cancelled_paged_campaign(stores)  # 12 sent, 17 unsent
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus,
                              ApprovalGate(stores.devices, 20))
    correction = await creator.correct(original.id, RetargetRequest(title="fixed"), CREATOR)
    assert correction is not None and correction.retarget and correction.amend
    assert (correction.retarget.status, correction.amend.status) == (
        Status.AWAITING_APPROVAL, Status.AWAITING_APPROVAL)
    assert (correction.retarget.audience_estimate, correction.amend.audience_estimate) == (
        17, 12)
    assert bus.dispatches == []


async def test_follow_ups_one_after_the_other_are_judged_with_those_sent_unapproved() -> None:
    stores, bus = fake_stores(), FakeBus()
    original = await cancelled_paged_campaign(stores)  # 12 sent, 17 unsent
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus,
                              ApprovalGate(stores.devices, 20))
    retarget = await creator.retarget(original.id, RetargetRequest(), CREATOR)
    amend = await creator.amend(original.id, AmendRequest(), CREATOR)
    assert retarget is not None and amend is not None
    assert (retarget.status, amend.status) == (Status.PENDING, Status.AWAITING_APPROVAL)
