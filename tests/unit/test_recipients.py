"""The audit and the final counts, computed from the same records, and the recipient sources
a dispatcher pages: an audience, an earlier campaign's unsent, local-time waves."""

from __future__ import annotations

from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    Dispatch,
    FollowUp,
    FollowUpOf,
    LocalTime,
    Outcome,
    new_id,
)
from herald.domain.status import Status
from herald.domain.timing import Wave
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import (
    FollowUpSource,
    LocalTimeSource,
    audit,
    final_counts,
    source_for,
    targeted,
    unpaged,
    unsent,
)
from tests.factories import EVERYONE, at, campaign, device, insert, recipients


def sent(*positions: int) -> list[tuple[int, str | None]]:
    return [(position, None) for position in positions]


async def stored(stores: Stores, campaign_id: str) -> Campaign:
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def lines(stores: Stores, campaign_id: str, outcome: Outcome) -> list[str]:
    return [line.token async for line in audit(stores, await stored(stores, campaign_id),
                                               outcome)]


async def paged_campaign(stores: Stores) -> str:
    """Three chunks of ten: the first fully recorded (position 5 twice, first answer kept),
    the second partly (one dead token, one quota failure), the third not at all."""
    campaign_id = await insert(stores, status=Status.IN_PROGRESS,
                               dispatch=Dispatch(owner="d", next_seq=3, done=True),
                               counts=CampaignCounts(targeted=30))
    now = utcnow()
    for seq in range(3):
        await stores.chunks.create(campaign_id, seq, recipients(10 * seq, 10 * seq + 10),
                                   cursor=None, now=now)
    await stores.deliveries.record(campaign_id, 0, "s1", at(sent(*range(6))), now)
    await stores.deliveries.record(campaign_id, 0, "s2",
                                   at([(5, "UNAVAILABLE"), *sent(*range(6, 10))]), now)
    await stores.deliveries.record(campaign_id, 1, "s1", at([(0, None), (1, "UNREGISTERED"),
                                                          (2, None), (3, "QUOTA_EXCEEDED")]), now)
    return campaign_id


def tokens(*numbers: int) -> list[str]:
    return [f"tok-{i:05d}" for i in numbers]


async def test_each_recipient_appears_once_under_its_outcome_in_chunk_order(
        stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    assert await lines(stores, campaign_id, Outcome.SENT) == tokens(*range(10), 10, 12)
    assert await lines(stores, campaign_id, Outcome.FAILED) == tokens(11, 13)
    assert await lines(stores, campaign_id, Outcome.UNSENT) == tokens(*range(14, 30))


async def test_a_failed_line_carries_fcms_error(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    failed = [line async for line in audit(stores, await stored(stores, campaign_id),
                                           Outcome.FAILED)]
    assert [(line.token, line.user_id, line.error) for line in failed] == [
        ("tok-00011", "u11", "UNREGISTERED"), ("tok-00013", "u13", "QUOTA_EXCEEDED")]
    assert failed[0].as_dict() == {"token": "tok-00011", "user_id": "u11", "outcome": "failed",
                                   "error": "UNREGISTERED", "variant": "default", "rule": None}


async def test_final_counts_agree_with_the_audit(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    final = await final_counts(stores, await stored(stores, campaign_id))
    assert final.counts == CampaignCounts(targeted=30, sent=12, failed=2)
    assert final.failed_not_by_token == 1
    assert final.counts.unsent == len(await lines(stores, campaign_id, Outcome.UNSENT))


async def devices_bounded(stores: Stores, count: int, **fields: object) -> list[str]:
    """``count`` devices (every tenth push-disabled), their ids."""
    await stores.devices.upsert([device(i, push_enabled=i % 10 != 9, **fields)
                                 for i in range(count)], utcnow())
    return [i async for i, _ in stores.devices.stream(EVERYONE, None, None)]


async def test_unsent_includes_the_part_of_the_audience_never_paged(stores: Stores) -> None:
    ids = await devices_bounded(stores, 40)
    campaign_id = await insert(stores, status=Status.CANCELLING, counts=CampaignCounts(targeted=9),
                               dispatch=Dispatch(owner="d", until=ids[29], next_seq=1))
    await stores.devices.upsert([device(500)], utcnow())  # registered after the bound
    await stores.chunks.create(campaign_id, 0, recipients(0, 9), cursor=ids[9], now=utcnow())
    await stores.deliveries.record(campaign_id, 0, "s", at(sent(*range(4))), utcnow())
    rest = [i for i in range(10, 30) if i % 10 != 9]
    assert await lines(stores, campaign_id, Outcome.UNSENT) == tokens(*range(4, 9), *rest)
    final = await final_counts(stores, await stored(stores, campaign_id))
    assert final.counts == CampaignCounts(targeted=9 + len(rest), sent=4)


async def test_a_chunk_written_but_never_checkpointed_is_targeted_once(stores: Stores) -> None:
    """Its dispatcher died between writing and checkpointing it: the audience resumes after it."""
    ids = await devices_bounded(stores, 12)
    campaign_id = await insert(stores, status=Status.CANCELLING, counts=CampaignCounts(targeted=4),
                               dispatch=Dispatch(owner="d", until=ids[-1], next_seq=1))
    await stores.chunks.create(campaign_id, 0, recipients(0, 4), cursor=ids[3], now=utcnow())
    await stores.chunks.create(campaign_id, 1, recipients(4, 8), cursor=ids[7], now=utcnow())
    unsent_tokens = await lines(stores, campaign_id, Outcome.UNSENT)
    assert unsent_tokens == tokens(*range(9), 10, 11)
    assert await targeted(stores, await stored(stores, campaign_id)) == len(unsent_tokens)


async def test_a_fully_paged_campaign_reads_nothing_more_from_its_audience(
        stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    await stores.devices.upsert([device(i) for i in range(100, 105)], utcnow())
    assert "tok-00100" not in await lines(stores, campaign_id, Outcome.UNSENT)
    assert await targeted(stores, await stored(stores, campaign_id)) == 30


async def test_a_retarget_reaches_exactly_the_unsent_and_resumes_inside_that_list(
        stores: Stores) -> None:
    parent = await stored(stores, await paged_campaign(stores))
    source = FollowUpSource(stores, parent)
    everything = [(position, r.token) async for position, r in source.stream(after=None)]
    resumed = [(position, r.token) async for position, r in source.stream(after=5)]
    assert [token for _, token in everything] == [line.token async for line in
                                                  unsent(stores, parent)]
    assert [position for position, _ in everything] == list(range(1, 17))
    assert resumed == everything[5:]


async def test_a_retry_also_reaches_those_that_failed_for_reasons_other_than_their_token(
        stores: Stores) -> None:
    parent = await stored(stores, await paged_campaign(stores))
    source = FollowUpSource(stores, parent, FollowUpOf.NOT_SENT)
    reached = [r.token async for _, r in source.stream(after=None)]
    assert reached == tokens(13, *range(14, 30))  # the quota failure, not the dead token


async def test_a_follow_up_pages_from_its_parent(stores: Stores) -> None:
    parent_id = await paged_campaign(stores)
    follow_up = campaign(follow_up=FollowUp(parent_id, FollowUpOf.NOT_SENT))
    source = await source_for(stores, follow_up)
    assert isinstance(source, FollowUpSource)
    assert [r.token async for _, r in source.stream(after=None)] == tokens(13, *range(14, 30))


async def test_a_follow_up_of_a_vanished_campaign_has_no_source(stores: Stores) -> None:
    with pytest.raises(LookupError):
        await source_for(stores, campaign(follow_up=FollowUp(new_id(), FollowUpOf.UNSENT)))


async def test_local_time_waves_are_streamed_when_due_and_resumed_wave_by_wave(
        stores: Stores) -> None:
    zones = ["Asia/Seoul", "Europe/Madrid", None, "Mars/Olympus", "Asia/Tokyo"]
    await stores.devices.upsert([device(i) for i in range(20)], utcnow())
    await stores.devices.upsert([device(i, timezone=zones[i % 5]) for i in range(20)
                                 if zones[i % 5] != "Mars/Olympus"], utcnow())
    now = utcnow()
    waves = (Wave(now - timedelta(seconds=1), ("Asia/Seoul", "Asia/Tokyo"), others=True),
             Wave(now + timedelta(hours=8), ("Europe/Madrid",)))
    due_now = LocalTimeSource(stores, Audience(), waves, None, due_by=now)
    whole = LocalTimeSource(stores, Audience(), waves, None, due_by=None)
    first = [(p, r.token) async for p, r in due_now.stream(after=None)]
    everything = [(p, r.token) async for p, r in whole.stream(after=None)]
    resumed = [(p, r.token) async for p, r in whole.stream(after=first[-1][0])]
    madrid = {f"tok-{i:05d}" for i in range(20) if i % 5 == 1}
    assert {token for _, token in first} == {f"tok-{i:05d}" for i in range(20)} - madrid
    assert all(isinstance(p, tuple) and p[0] == 0 for p, _ in first)
    assert due_now.next_wave_due() == waves[1].due_at and whole.next_wave_due() is None
    assert [token for _, token in everything] == [token for _, token in first] + sorted(madrid)
    assert resumed == everything[len(first):]


async def test_a_local_time_campaign_pages_its_planned_waves(stores: Stores) -> None:
    waves = (Wave(utcnow(), ("UTC",), others=True),)
    local = campaign(local_time=LocalTime("2030-01-01T09:00:00", "UTC"),
                     dispatch=Dispatch(owner="d", waves=waves))
    assert isinstance(await source_for(stores, local), LocalTimeSource)


async def test_the_unpaged_rest_is_counted_by_the_database_and_listed_from_the_cursor(
        stores: Stores) -> None:
    """Issue 33: a cancelled campaign's rest is the audience beyond the last chunk written
    (checkpointed or not: chunk 1 below was written by a dispatcher that died before its
    checkpoint), up to the newest device at the claim; nothing is frozen."""
    ids = await devices_bounded(stores, 8)
    await stores.devices.upsert([device(90)], utcnow())  # registered after the claim
    campaign_id = await insert(stores, status=Status.CANCELLING, chunk_size=3,
                               counts=CampaignCounts(targeted=3),
                               dispatch=Dispatch(owner="d", until=ids[-1], next_seq=1))
    await stores.chunks.create(campaign_id, 0, recipients(0, 3), cursor=ids[2], now=utcnow())
    await stores.chunks.create(campaign_id, 1, recipients(3, 5), cursor=ids[4], now=utcnow())
    cancelling = await stored(stores, campaign_id)
    assert await unpaged(stores, cancelling) == 3
    assert await targeted(stores, cancelling) == 8
    assert [line.token async for line in unsent(stores, cancelling)] == tokens(*range(8))
