"""Creating campaigns: idempotently from a request, as a retarget or retry of another one, and
editing one that has not fired yet."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from herald.clock import utcnow
from herald.contracts.http import CampaignCreate, CampaignPatch, RetargetRequest
from herald.domain.access import Role
from herald.domain.audience import Audience, Platform
from herald.domain.documents import (
    Campaign,
    CampaignContent,
    Dispatch,
    FollowUp,
    FollowUpOf,
    IdempotencyBinding,
    LocalTime,
    new_id,
)
from herald.domain.status import Status
from herald.domain.timing import AmbiguousTime
from herald.service_layer.campaigns import (
    STALE_KEY_AFTER,
    CampaignCreator,
    IdempotencyMismatch,
    InvalidChange,
    NotEditable,
    NothingToFollowUp,
    NotRetargetable,
    NotRetryable,
    SendAtInPast,
    edit_scheduled,
    fingerprint,
)
from herald.service_layer.ports import Stores
from tests.factories import ACTOR, insert
from tests.unit.fakes import FakeBus, FakeCampaigns, fake_stores


@pytest.fixture
def creator(stores: Stores, bus: FakeBus) -> CampaignCreator:
    return CampaignCreator(stores.campaigns, stores.idempotency, bus)


def request(**fields: Any) -> CampaignCreate:
    return CampaignCreate.model_validate({"title": "Live now", "body": "Tap to watch", **fields})


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


def in_an_hour() -> str:
    return (utcnow() + timedelta(hours=1)).isoformat()


# --- creating ----------------------------------------------------------------------------------
async def test_a_campaign_to_send_now_is_stored_pending_and_a_dispatcher_is_woken(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    created = await creator.create(request(data={"landingUrl": "https://x.test"}), None, ACTOR)
    campaign = created.campaign
    assert created.created and campaign.status is Status.PENDING
    assert campaign.content == CampaignContent("Live now", "Tap to watch",
                                       {"landingUrl": "https://x.test"})
    assert await stored(stores, campaign.id) == campaign
    assert bus.dispatches == [campaign.id]


async def test_a_campaign_for_later_is_scheduled_and_wakes_nobody(
        creator: CampaignCreator, bus: FakeBus) -> None:
    send_at = in_an_hour()
    created = await creator.create(request(send_at=send_at), None, ACTOR)
    assert created.campaign.status is Status.SCHEDULED
    assert created.campaign.due_at == datetime.fromisoformat(send_at)
    assert bus.dispatches == []


async def test_a_send_at_in_the_past_is_refused(creator: CampaignCreator,
                                                 stores: Stores) -> None:
    with pytest.raises(SendAtInPast):
        await creator.create(request(send_at="2020-01-01T00:00:00Z"), None, ACTOR)
    assert await stores.campaigns.page(None, None, 10) == []


async def test_a_local_time_campaign_starts_where_the_wall_clock_gets_there_first(
        creator: CampaignCreator) -> None:
    created = await creator.create(request(send_at="2030-06-01T09:00:00", timezone="Asia/Seoul",
                                           deliver_in_local_time=True), None, ACTOR)
    campaign = created.campaign
    assert campaign.local_time == LocalTime("2030-06-01T09:00:00", "Asia/Seoul")
    assert campaign.due_at == datetime(2030, 5, 31, 19, 0, tzinfo=UTC)  # 09:00 at UTC+14


async def test_a_campaign_created_while_rabbitmq_is_away_is_still_stored(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    bus.away = True
    created = await creator.create(request(), None, ACTOR)
    assert await stored(stores, created.campaign.id) == created.campaign  # the sweep finds it


async def test_the_same_key_with_the_same_body_returns_the_same_campaign(
        stores: Stores, creator: CampaignCreator, bus: FakeBus) -> None:
    first = await creator.create(request(), "key-1", ACTOR)
    again = await creator.create(request(), "key-1", ACTOR)
    assert (first.created, again.created) == (True, False)
    assert again.campaign == first.campaign
    assert len(await stores.campaigns.page(None, None, 10)) == 1
    assert bus.dispatches == [first.campaign.id]


async def test_the_same_key_with_another_body_is_a_mismatch(
        stores: Stores, creator: CampaignCreator) -> None:
    await creator.create(request(), "key-1", ACTOR)
    with pytest.raises(IdempotencyMismatch):
        await creator.create(request(title="Another"), "key-1", ACTOR)
    assert len(await stores.campaigns.page(None, None, 10)) == 1


async def test_different_keys_create_different_campaigns(creator: CampaignCreator) -> None:
    first = await creator.create(request(), "key-1", ACTOR)
    second = await creator.create(request(), "key-2", ACTOR)
    assert first.campaign.id != second.campaign.id and second.created


async def test_a_key_whose_first_request_died_before_creating_is_taken_over(
        stores: Stores, creator: CampaignCreator) -> None:
    body = request()
    dead_request = IdempotencyBinding("key-1", fingerprint(body), new_id(),
                                      utcnow() - STALE_KEY_AFTER - timedelta(seconds=1))
    await stores.idempotency.reserve(dead_request)
    created = await creator.create(body, "key-1", ACTOR)
    again = await creator.create(body, "key-1", ACTOR)
    assert created.created and again.campaign == created.campaign


class AppearsAfterOneLook(FakeCampaigns):
    """The first request with the key stores its campaign just after the second one looked."""

    def __init__(self, late: Campaign) -> None:
        super().__init__()
        self._late: Campaign | None = late

    async def get(self, campaign_id: str) -> Campaign | None:
        found = await super().get(campaign_id)
        if found is None and self._late is not None:
            await self.insert(self._late)
            self._late = None
        return found


async def test_a_second_request_waits_for_the_first_with_the_same_key(bus: FakeBus) -> None:
    body = request()
    elsewhere = fake_stores()
    first = await CampaignCreator(elsewhere.campaigns, elsewhere.idempotency, bus).create(
        body, None, ACTOR)
    stores = replace(fake_stores(), campaigns=AppearsAfterOneLook(first.campaign))
    await stores.idempotency.reserve(IdempotencyBinding(
        f"{ACTOR.id}:key-1", fingerprint(body), first.campaign.id, utcnow()))
    again = await CampaignCreator(stores.campaigns, stores.idempotency, bus).create(body, "key-1", ACTOR)
    assert (again.created, again.campaign) == (False, first.campaign)


# --- follow-ups --------------------------------------------------------------------------------
async def finished(stores: Stores, status: Status, **changes: Any) -> str:
    """A campaign that finished after paging had started."""
    return await insert(stores, status=status, dispatch=Dispatch(owner="d", done=True),
                        content=CampaignContent("Old title", "Old body", {"k": "v"}, "https://i.test/a"),
                        name="launch", chunk_size=250, rate_per_s=100, **changes)


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.COMPLETED, Status.FAILED])
async def test_a_retarget_reaches_the_unsent_of_a_finished_campaign_with_new_content(
        stores: Stores, creator: CampaignCreator, bus: FakeBus, status: Status) -> None:
    parent_id = await finished(stores, status, schedule_id=new_id())
    parent = await stored(stores, parent_id)
    follow_up = await creator.retarget(parent_id, RetargetRequest(title="Fixed link"), ACTOR)
    assert follow_up is not None and follow_up.status is Status.PENDING
    assert follow_up.follow_up == FollowUp(parent_id, FollowUpOf.UNSENT)
    assert follow_up.content == CampaignContent("Fixed link", "Old body", {"k": "v"}, "https://i.test/a")
    assert (follow_up.name, follow_up.source, follow_up.audience) == ("launch (retarget)",
                                                                      "retarget", None)
    assert (follow_up.chunk_size, follow_up.rate_per_s) == (250, 100)
    assert follow_up.schedule_id == parent.schedule_id
    assert await stored(stores, follow_up.id) == follow_up
    assert bus.dispatches == [follow_up.id]


async def test_a_retarget_may_replace_the_data_and_the_chunk_size(
        stores: Stores, creator: CampaignCreator) -> None:
    parent_id = await finished(stores, Status.CANCELLED)
    follow_up = await creator.retarget(parent_id, RetargetRequest.model_validate(
        {"data": {"k": "w"}, "chunk_size": 10, "name": "again", "image_url": "https://i.test/b"}), ACTOR)
    assert follow_up is not None
    assert follow_up.content == CampaignContent("Old title", "Old body", {"k": "w"}, "https://i.test/b")
    assert (follow_up.name, follow_up.chunk_size) == ("again", 10)


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.PENDING, Status.IN_PROGRESS,
                                    Status.FINALIZING, Status.CANCELLING])
async def test_a_campaign_not_finished_cannot_be_retargeted(
        stores: Stores, creator: CampaignCreator, status: Status) -> None:
    parent_id = await insert(stores, status=status)
    with pytest.raises(NotRetargetable):
        await creator.retarget(parent_id, RetargetRequest(), ACTOR)


async def test_a_campaign_that_never_started_paging_has_no_one_to_follow_up(
        stores: Stores, creator: CampaignCreator) -> None:
    parent_id = await insert(stores, status=Status.CANCELLED)  # cancelled before it was claimed
    with pytest.raises(NothingToFollowUp):
        await creator.retarget(parent_id, RetargetRequest(), ACTOR)


async def test_an_unknown_campaign_is_neither_retargeted_nor_retried(
        creator: CampaignCreator) -> None:
    assert await creator.retarget(new_id(), RetargetRequest(), ACTOR) is None
    assert await creator.retry(new_id(), ACTOR) is None


async def test_a_failed_campaign_is_retried_for_everyone_it_did_not_reach(
        stores: Stores, creator: CampaignCreator) -> None:
    parent_id = await finished(stores, Status.FAILED)
    retry = await creator.retry(parent_id, ACTOR)
    assert retry is not None
    assert retry.follow_up == FollowUp(parent_id, FollowUpOf.NOT_SENT)
    assert (retry.name, retry.source) == ("launch (retry)", "retry")
    assert retry.content == CampaignContent("Old title", "Old body", {"k": "v"}, "https://i.test/a")


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.CANCELLED, Status.IN_PROGRESS])
async def test_only_a_failed_campaign_is_retried(stores: Stores, creator: CampaignCreator,
                                                 status: Status) -> None:
    parent_id = await finished(stores, status)
    with pytest.raises(NotRetryable):
        await creator.retry(parent_id, ACTOR)


# --- editing a scheduled campaign --------------------------------------------------------------
async def scheduled(creator: CampaignCreator, **fields: Any) -> Campaign:
    created = await creator.create(request(**{
        "send_at": in_an_hour(), "name": "promo", "data": {"k": "v"},
        "image_url": "https://i.test/a", **fields}), None, ACTOR)
    return created.campaign


def patch(**fields: Any) -> CampaignPatch:
    return CampaignPatch.model_validate(fields)


async def test_a_scheduled_campaign_takes_the_changes_given(
        stores: Stores, creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    audience = Audience(platforms=[Platform.IOS])
    edited = await edit_scheduled(stores.campaigns, current.id, patch(
        title="New", data={"k": "w"}, audience=audience.model_dump(), name="renamed"),
              Role.OPERATOR, ACTOR)
    assert edited is not None
    assert edited.content == CampaignContent("New", "Tap to watch", {"k": "w"}, "https://i.test/a")
    assert (edited.name, edited.audience, edited.due_at) == ("renamed", audience,
                                                             current.due_at)
    assert edited == await stored(stores, current.id)


async def test_nulls_in_a_patch_change_nothing(stores: Stores, creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    edited = await edit_scheduled(stores.campaigns, current.id, patch(
        title=None, body=None, data=None, image_url=None, name=None, audience=None,
        send_at=None, timezone=None), Role.OPERATOR, ACTOR)
    assert edited is not None
    assert (edited.content, edited.name, edited.audience, edited.due_at) == (
        current.content, current.name, current.audience, current.due_at)


async def test_a_change_past_fcms_size_limit_is_refused(stores: Stores,
                                                         creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    with pytest.raises(InvalidChange) as refused:
        await edit_scheduled(stores.campaigns, current.id, patch(data={"big": "x" * 3900},
                                                       body="y" * 400), Role.OPERATOR, ACTOR)
    assert "FCM accepts at most 4096" in str(refused.value)
    assert await stored(stores, current.id) == current


async def test_moving_a_campaign_moves_its_due_time(stores: Stores,
                                                     creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    later = utcnow().replace(microsecond=0) + timedelta(hours=5)
    edited = await edit_scheduled(stores.campaigns, current.id, patch(send_at=later.isoformat()),
                                  Role.OPERATOR, ACTOR)
    assert edited is not None and edited.due_at == later


async def test_a_local_time_campaign_moved_to_another_zone_keeps_its_wall_clock(
        stores: Stores, creator: CampaignCreator) -> None:
    current = await scheduled(creator, send_at="2030-06-01T09:00:00", timezone="Asia/Seoul",
                              deliver_in_local_time=True)
    edited = await edit_scheduled(stores.campaigns, current.id, patch(timezone="Europe/Madrid"),
                                  Role.OPERATOR, ACTOR)
    assert edited is not None
    assert edited.local_time == LocalTime("2030-06-01T09:00:00", "Europe/Madrid")
    assert edited.due_at == current.due_at  # still where 09:00 comes first on Earth


async def test_a_timezone_alone_does_not_move_a_campaign(stores: Stores,
                                                          creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    with pytest.raises(AmbiguousTime):
        await edit_scheduled(stores.campaigns, current.id, patch(timezone="Asia/Seoul"),
                             Role.OPERATOR, ACTOR)


async def test_a_campaign_cannot_be_moved_into_the_past(stores: Stores,
                                                        creator: CampaignCreator) -> None:
    current = await scheduled(creator)
    with pytest.raises(SendAtInPast):
        await edit_scheduled(stores.campaigns, current.id, patch(send_at="2020-01-01T00:00:00Z"),
                             Role.OPERATOR, ACTOR)


@pytest.mark.parametrize("status", [Status.PENDING, Status.IN_PROGRESS, Status.CANCELLED])
async def test_only_a_scheduled_campaign_is_edited(stores: Stores, status: Status) -> None:
    campaign_id = await insert(stores, status=status)
    with pytest.raises(NotEditable) as refused:
        await edit_scheduled(stores.campaigns, campaign_id, patch(title="New"), Role.OPERATOR, ACTOR)
    assert refused.value.status is status


async def test_an_unknown_campaign_is_not_edited(stores: Stores) -> None:
    assert await edit_scheduled(stores.campaigns, new_id(), patch(title="New"),
                                Role.OPERATOR, ACTOR) is None


class FiresWhileEdited(FakeCampaigns):
    """The scheduler fires the campaign between the edit's read and its write."""

    async def patch_scheduled(self, edited: Campaign, now: datetime,
                              was: Status = Status.SCHEDULED) -> Campaign | None:
        current = await self.get(edited.id)
        assert current is not None
        await self.fire(edited.id, now, "scheduler", due_at=current.due_at)
        return await super().patch_scheduled(edited, now, was)


async def test_a_campaign_that_fired_during_the_edit_is_not_edited(bus: FakeBus) -> None:
    stores = replace(fake_stores(), campaigns=FiresWhileEdited())
    current = await scheduled(CampaignCreator(stores.campaigns, stores.idempotency, bus))
    with pytest.raises(NotEditable) as refused:
        await edit_scheduled(stores.campaigns, current.id, patch(title="New"), Role.OPERATOR, ACTOR)
    assert refused.value.status is Status.PENDING
    assert (await stored(stores, current.id)).content.title == "Live now"
