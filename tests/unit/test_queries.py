"""What the API reads: one campaign or schedule, pages of them, and a campaign's audit."""

from __future__ import annotations

import pytest

from herald.clock import utcnow
from herald.domain.audience import Audience, Platform
from herald.domain.documents import CampaignCounts, Dispatch, Outcome, new_id
from herald.domain.status import Status
from herald.service_layer import queries
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import Stores
from tests.factories import at, device, insert, recipients, schedule


async def test_a_campaign_is_read_by_its_id(stores: Stores) -> None:
    campaign_id = await insert(stores)
    assert (await queries.campaign(stores.campaigns, campaign_id)).id == campaign_id
    with pytest.raises(CampaignNotFound):
        await queries.campaign(stores.campaigns, new_id())


async def test_campaigns_are_paged_newest_first_with_a_cursor_while_more_follow(
        stores: Stores) -> None:
    ids = [await insert(stores) for _ in range(5)]
    first = await queries.campaigns(stores.campaigns, None, None, 2)
    second = await queries.campaigns(stores.campaigns, None, first.next_cursor, 2)
    last = await queries.campaigns(stores.campaigns, None, second.next_cursor, 2)
    assert [c.id for c in first.items] == [ids[4], ids[3]] and first.next_cursor == ids[3]
    assert [c.id for c in second.items] == [ids[2], ids[1]] and second.next_cursor == ids[1]
    assert [c.id for c in last.items] == [ids[0]] and last.next_cursor is None


async def test_campaigns_are_filtered_by_status(stores: Stores) -> None:
    done = await insert(stores, status=Status.COMPLETED)
    await insert(stores)
    cancelled = await insert(stores, status=Status.CANCELLED)
    page = await queries.campaigns(stores.campaigns, [Status.COMPLETED, Status.CANCELLED], None, 10)
    assert [c.id for c in page.items] == [cancelled, done] and page.next_cursor is None


async def test_an_audit_of_an_unknown_campaign_fails_before_it_streams(stores: Stores) -> None:
    with pytest.raises(CampaignNotFound):
        await queries.recipients(stores, new_id(), Outcome.SENT)


async def test_an_audit_streams_the_recipients_of_one_outcome(stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.COMPLETED, counts=CampaignCounts(targeted=3),
                               dispatch=Dispatch(owner="d", next_seq=1, done=True))
    await stores.chunks.create(campaign_id, 0, recipients(0, 3), None, utcnow())
    await stores.deliveries.record(campaign_id, 0, "s1", at([(0, None), (2, "UNREGISTERED")]),
                                   utcnow())
    lines = await queries.recipients(stores, campaign_id, Outcome.FAILED)
    assert [(line.token, line.error) async for line in lines] == [("tok-00002",
                                                                   "UNREGISTERED")]


async def test_schedules_are_read_by_id_and_paged_newest_first(stores: Stores) -> None:
    made = [schedule() for _ in range(3)]
    for each in made:
        await stores.schedules.insert(each)
    page = await queries.schedules(stores.schedules, None, 2)
    rest = await queries.schedules(stores.schedules, page.next_cursor, 2)
    assert [s.id for s in page.items] == [made[2].id, made[1].id]
    assert [s.id for s in rest.items] == [made[0].id] and rest.next_cursor is None
    assert await queries.schedule(stores.schedules, made[0].id) == made[0]
    with pytest.raises(queries.ScheduleNotFound):
        await queries.schedule(stores.schedules, new_id())


async def test_an_audience_is_sized_with_the_dispatchers_own_query(stores: Stores) -> None:
    await stores.devices.upsert([device(0, platform="ios"), device(1, push_enabled=False),
                                 device(2, platform="android")], utcnow())
    assert await queries.audience_size(stores.devices, Audience()) == 2
    assert await queries.audience_size(stores.devices, Audience(platforms=[Platform.IOS])) == 1
