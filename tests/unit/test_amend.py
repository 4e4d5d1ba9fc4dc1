"""Correcting what was already sent (issue 14): an amend replaces the original on the devices FCM
accepted it for, with the original's key; a correction is a retarget of the unsent and an amend
of the sent in one step, nobody getting both; each is idempotent per Idempotency-Key."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import orjson
import pytest

from herald.clock import utcnow
from herald.contracts.http import AmendRequest, CorrectRequest, RetargetRequest
from herald.domain.documents import (
    Campaign,
    CampaignContent,
    CampaignCounts,
    Dispatch,
    FollowUp,
    FollowUpOf,
    Outcome,
    new_id,
)
from herald.domain.messages import RecipientDevice
from herald.domain.payload import PayloadTooLarge
from herald.domain.status import Status, Transition
from herald.service_layer.campaigns import (
    CampaignCreator,
    IdempotencyMismatch,
    InvalidChange,
    NotAmendable,
    NotCorrectable,
    NothingToAmend,
    NothingToCorrect,
    NotRetargetable,
)
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import audit, final_counts, source_for
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.stopping import PodView
from tests.factories import ACTOR, actor, at, cancelled_paged_campaign, insert
from tests.unit.fakes import FakeBus, FakeCampaigns, FakeFlags, fake_stores

LEASE = timedelta(seconds=30)
FIXED = {"landingUrl": "https://example.com/fixed"}


@pytest.fixture
def creator(stores: Stores, bus: FakeBus) -> CampaignCreator:
    return CampaignCreator(stores.campaigns, stores.idempotency, bus)


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


def paged_counts(sent: int, unsent: int = 0) -> CampaignCounts:
    """Final counts of a finished campaign that sent ``sent`` and left ``unsent`` unsent."""
    return CampaignCounts(targeted=sent + unsent, sent=sent)


async def delivered(stores: Stores, campaign: Campaign) -> Campaign:
    """What a dispatcher and a sender leave of ``campaign``: its recipients paged into one
    chunk, FCM accepting every one, the campaign completed with the counts of its records."""
    now = utcnow()
    recipients = [r async for _, r in (await source_for(stores, campaign)).stream(after=None)]
    assert await stores.campaigns.claim_for_dispatch(campaign.id, "d", now, now + LEASE)
    await stores.chunks.create(campaign.id, 0, recipients, len(recipients), now)
    assert await stores.campaigns.checkpoint(campaign.id, "d", 0, len(recipients), now + LEASE)
    assert await stores.campaigns.finish_dispatch(campaign.id, "d", now)
    await stores.deliveries.record(campaign.id, 0, "s",
                                   at((p, None) for p in range(len(recipients))), now)
    assert await stores.campaigns.transition(campaign.id, Transition.FINALIZE, now)
    counts = (await final_counts(stores, await stored(stores, campaign.id))).counts
    finished = await stores.campaigns.finish(campaign.id, Transition.COMPLETE, counts, None, now)
    assert finished is not None
    return finished


async def reached(stores: Stores, follow_up: Campaign) -> list[str]:
    """The tokens ``follow_up``'s dispatcher pages, in order."""
    return [r.token async for _, r in (await source_for(stores, follow_up)).stream(after=None)]


async def tokens(stores: Stores, campaign: Campaign, outcome: Outcome) -> list[str]:
    return [line.token async for line in audit(stores, campaign, outcome)]


# --- amend -------------------------------------------------------------------------------------
async def test_an_amend_reaches_exactly_the_sent_with_the_originals_key_linked_both_ways(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    original = await cancelled_paged_campaign(stores)
    amend = await creator.amend(original.id, AmendRequest(data=FIXED), ACTOR)
    assert amend is not None and amend.status is Status.PENDING
    assert amend.follow_up == FollowUp(original.id, FollowUpOf.SENT)
    assert (amend.amends, amend.source, amend.created_by) == (original.id, "amend", ACTOR)
    assert amend.sent_with_key == original.sent_with_key == f"herald-{original.id}"
    assert amend.content == CampaignContent(original.content.title, original.content.body, FIXED)
    assert await reached(stores, amend) == await tokens(stores, original, Outcome.SENT)
    assert len(await reached(stores, amend)) == original.counts.sent == 12
    assert (await stored(stores, original.id)).amended_by == (amend.id,)
    assert await stored(stores, amend.id) == amend
    assert bus.dispatches == [amend.id]


async def test_an_amend_of_an_amend_keeps_the_first_key_and_reaches_who_got_the_amend(
        stores: Stores, creator: CampaignCreator) -> None:
    original = await cancelled_paged_campaign(stores)
    first = await creator.amend(original.id, AmendRequest(body="Second try"), ACTOR)
    assert first is not None
    first = await delivered(stores, first)
    second = await creator.amend(first.id, AmendRequest(body="Third try"), ACTOR)
    assert second is not None
    assert second.sent_with_key == first.sent_with_key == original.sent_with_key
    assert await reached(stores, second) == await tokens(stores, original, Outcome.SENT)
    assert (await stored(stores, original.id)).amended_by == (first.id,)
    assert (await stored(stores, first.id)).amended_by == (second.id,)


async def test_an_amend_keeps_a_key_the_original_named(stores: Stores,
                                                       creator: CampaignCreator) -> None:
    original = await insert(stores, status=Status.COMPLETED, replace_key="promo:2026.11",
                            counts=paged_counts(sent=3))
    amend = await creator.amend(original, AmendRequest(), ACTOR)
    assert amend is not None and amend.sent_with_key == "promo:2026.11"


async def test_the_sender_sends_an_amend_with_the_originals_key_on_every_platform(
        stores: Stores, creator: CampaignCreator, flags: FakeFlags) -> None:
    original = await cancelled_paged_campaign(stores)
    amend = await creator.amend(original.id, AmendRequest(data=FIXED), ACTOR)
    assert amend is not None
    now = utcnow()
    assert await stores.campaigns.claim_for_dispatch(amend.id, "d", now, now + LEASE)
    info = await CampaignCache(stores.campaigns, PodView(stores.campaigns, flags)).get(amend.id)
    assert info is not None
    device = RecipientDevice(None, None, None, "android")
    body = info.content.message_for("tok", device).body
    message = orjson.loads(body.at(0.0) if body else b"")["message"]
    key = original.sent_with_key
    assert message["android"] == {"collapse_key": key, "notification": {"tag": key}}
    assert message["apns"] == {"headers": {"apns-collapse-id": key}}
    assert message["webpush"]["notification"] == {"tag": key}
    assert message["webpush"]["headers"]["Topic"] == key
    assert message["data"] == FIXED


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.PENDING, Status.IN_PROGRESS,
                                    Status.FINALIZING, Status.CANCELLING])
async def test_a_campaign_still_running_is_neither_amended_nor_corrected(
        stores: Stores, creator: CampaignCreator, status: Status) -> None:
    campaign_id = await insert(stores, status=status, counts=paged_counts(sent=5, unsent=5))
    with pytest.raises(NotAmendable):
        await creator.amend(campaign_id, AmendRequest(), ACTOR)
    with pytest.raises(NotCorrectable):
        await creator.correct(campaign_id, CorrectRequest(), ACTOR)
    assert [c.id for c in await stores.campaigns.page(None, None, 10)] == [campaign_id]


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.MISSED, Status.FAILED])
async def test_a_campaign_that_sent_nothing_has_nothing_to_amend(
        stores: Stores, creator: CampaignCreator, status: Status) -> None:
    campaign_id = await insert(stores, status=status, counts=paged_counts(sent=0, unsent=4))
    with pytest.raises(NothingToAmend, match="retarget it instead"):
        await creator.amend(campaign_id, AmendRequest(), ACTOR)


async def test_an_unknown_campaign_is_neither_amended_nor_corrected(
        creator: CampaignCreator) -> None:
    assert await creator.amend(new_id(), AmendRequest(), ACTOR) is None
    assert await creator.correct(new_id(), CorrectRequest(), ACTOR) is None


# --- sizing with the key the follow-up is sent with -------------------------------------------
FITS_WITH_A_DERIVED_KEY = "b" * 3690
"""A body that fits FCM's limit with a 31-character key but not with a 64-character one."""


@pytest.mark.parametrize("follow_up", ["amend", "retarget", "correct"])
async def test_a_follow_up_too_big_with_the_originals_key_is_refused_and_nothing_made(
        stores: Stores, creator: CampaignCreator, bus: FakeBus, follow_up: str) -> None:
    finished: dict[str, Any] = {"status": Status.CANCELLED,
                                "dispatch": Dispatch(owner="d", done=True),
                                "counts": paged_counts(sent=3, unsent=3)}
    long_key = await insert(stores, replace_key="k" * 64, **finished)
    derived = await insert(stores, **finished)
    make = getattr(creator, follow_up)
    request = CorrectRequest(body=FITS_WITH_A_DERIVED_KEY)
    with pytest.raises(InvalidChange) as refused:
        await make(long_key, request, ACTOR)
    assert isinstance(refused.value.error.errors()[0]["ctx"]["error"], PayloadTooLarge)
    assert len(await stores.campaigns.page(None, None, 10)) == 2 and bus.dispatches == []
    assert await make(derived, request, ACTOR) is not None


# --- correct -----------------------------------------------------------------------------------
async def test_a_correction_retargets_the_unsent_and_amends_the_sent_nobody_getting_both(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    original = await cancelled_paged_campaign(stores)
    correction = await creator.correct(original.id, CorrectRequest(data=FIXED), ACTOR)
    assert correction is not None
    retarget, amend = correction.retarget, correction.amend
    assert retarget is not None and amend is not None
    assert correction.original.id == original.id
    assert (retarget.follow_up, retarget.source) == (FollowUp(original.id, FollowUpOf.UNSENT),
                                                     "retarget")
    assert (amend.follow_up, amend.source) == (FollowUp(original.id, FollowUpOf.SENT), "amend")
    assert retarget.content.data == amend.content.data == FIXED
    assert retarget.sent_with_key == amend.sent_with_key == original.sent_with_key
    unsent, sent = await reached(stores, retarget), await reached(stores, amend)
    assert unsent == await tokens(stores, original, Outcome.UNSENT)
    assert sent == await tokens(stores, original, Outcome.SENT)
    assert (len(unsent), len(sent)) == (original.counts.unsent, original.counts.sent) == (17, 12)
    assert not set(unsent) & set(sent)
    assert (await stored(stores, original.id)).amended_by == (amend.id,)
    assert bus.dispatches == [retarget.id, amend.id]


async def test_a_correction_makes_only_the_halves_that_reach_someone(
        stores: Stores, creator: CampaignCreator) -> None:
    all_sent = await insert(stores, status=Status.COMPLETED, counts=paged_counts(sent=5))
    none_sent = await insert(stores, status=Status.CANCELLED, counts=paged_counts(0, unsent=5))
    nobody = await insert(stores, status=Status.MISSED)
    only_amend = await creator.correct(all_sent, CorrectRequest(), ACTOR)
    only_retarget = await creator.correct(none_sent, CorrectRequest(), ACTOR)
    assert only_amend is not None and only_amend.retarget is None and only_amend.amend
    assert only_retarget is not None and only_retarget.amend is None and only_retarget.retarget
    with pytest.raises(NothingToCorrect):
        await creator.correct(nobody, CorrectRequest(), ACTOR)


async def test_a_retarget_and_an_amend_asked_at_once_share_nobody(
        stores: Stores, creator: CampaignCreator) -> None:
    original = await cancelled_paged_campaign(stores)
    retarget, amend = await asyncio.gather(
        creator.retarget(original.id, RetargetRequest(data=FIXED), ACTOR),
        creator.amend(original.id, AmendRequest(data=FIXED), ACTOR))
    assert retarget is not None and amend is not None
    unsent, sent = await reached(stores, retarget), await reached(stores, amend)
    assert not set(unsent) & set(sent)
    assert len(unsent) + len(sent) == original.counts.unsent + original.counts.sent


async def test_a_retarget_of_a_running_campaign_is_still_refused(
        stores: Stores, creator: CampaignCreator) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    with pytest.raises(NotRetargetable, match="retarget it once it has finished"):
        await creator.retarget(campaign_id, RetargetRequest(), ACTOR)


# --- idempotency -------------------------------------------------------------------------------
async def test_a_repeated_correction_with_the_same_key_returns_the_same_follow_ups(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    original = await cancelled_paged_campaign(stores)
    first = await creator.correct(original.id, CorrectRequest(data=FIXED), ACTOR, "k1")
    again, at_once = await asyncio.gather(
        creator.correct(original.id, CorrectRequest(data=FIXED), ACTOR, "k1"),
        creator.correct(original.id, CorrectRequest(data=FIXED), ACTOR, "k1"))
    assert first is not None and first.amend is not None
    assert again is not None and at_once is not None
    ids = {(c.retarget.id, c.amend.id) for c in (first, again, at_once)
           if c.retarget and c.amend}
    assert len(ids) == 1 and len(bus.dispatches) == 2
    assert len(await stores.campaigns.page(None, None, 10)) == 3
    assert (await stored(stores, original.id)).amended_by == (first.amend.id,)


async def test_the_same_key_with_another_body_is_a_mismatch(
        stores: Stores, creator: CampaignCreator) -> None:
    original = await cancelled_paged_campaign(stores)
    await creator.amend(original.id, AmendRequest(data=FIXED), ACTOR, "k1")
    with pytest.raises(IdempotencyMismatch):
        await creator.amend(original.id, AmendRequest(body="other"), ACTOR, "k1")


async def test_idempotency_keys_are_scoped_to_the_api_key_and_the_action(
        stores: Stores, creator: CampaignCreator) -> None:
    original = await cancelled_paged_campaign(stores)
    mine = await creator.amend(original.id, AmendRequest(), ACTOR, "k1")
    theirs = await creator.amend(original.id, AmendRequest(), actor("other-key"), "k1")
    retarget = await creator.retarget(original.id, RetargetRequest(), ACTOR, "k1")
    assert mine is not None and theirs is not None and retarget is not None
    assert len({mine.id, theirs.id, retarget.id}) == 3
    assert (await stored(stores, original.id)).amended_by == (mine.id, theirs.id)


async def test_a_correction_that_died_half_way_is_completed_by_its_retry(
        stores: Stores, creator: CampaignCreator) -> None:
    """A retarget made with the key stands for the correction's first half (it is what a
    correction that died before its amend left behind)."""
    original = await cancelled_paged_campaign(stores)
    half = await creator.retarget(original.id, RetargetRequest(data=FIXED), ACTOR, "k1")
    correction = await creator.correct(original.id, CorrectRequest(data=FIXED), ACTOR, "k1")
    assert half is not None and correction is not None and correction.amend is not None
    assert correction.retarget == await stored(stores, half.id)
    assert len(await stores.campaigns.page(None, None, 10)) == 3


class LinkFailsOnce(FakeCampaigns):
    """The database goes away once, right when an amend is being linked to its original."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def link_amendment(self, campaign_id: str, amend_id: str) -> None:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the database went away")
        await super().link_amendment(campaign_id, amend_id)


async def test_an_amend_whose_first_call_died_before_linking_it_is_linked_by_the_retry(
        bus: FakeBus) -> None:
    stores = replace(fake_stores(), campaigns=LinkFailsOnce())
    creator = CampaignCreator(stores.campaigns, stores.idempotency, bus)
    original = await cancelled_paged_campaign(stores)
    with pytest.raises(ConnectionError):
        await creator.amend(original.id, AmendRequest(), ACTOR, "k1")
    amend = await creator.amend(original.id, AmendRequest(), ACTOR, "k1")
    assert amend is not None
    assert (await stored(stores, original.id)).amended_by == (amend.id,)
    assert len(await stores.campaigns.page(None, None, 10)) == 2
