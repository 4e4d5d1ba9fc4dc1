"""The audit and the final counts are computed from the same records, on the MongoDB wire server."""

from __future__ import annotations

from datetime import timedelta

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.domain.documents import CampaignCounts, Dispatch, Outcome
from herald.domain.outcomes import RecipientOutcome
from herald.domain.timing import Wave
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import (
    FollowUpSource,
    LocalTimeSource,
    audit,
    final_counts,
)
from tests.factories import EVERYONE, at, campaign, device, paged_campaign, recipients

SENT, FAILED, UNSENT = Outcome.SENT, Outcome.FAILED, Outcome.UNSENT


def sent(*positions: int) -> list[RecipientOutcome]:
    return at((position, None) for position in positions)


async def lines(stores: Stores, campaign_id: str, outcome: Outcome) -> list[str]:
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    return [line.token async for line in audit(stores, stored, outcome)]


async def test_each_recipient_appears_once_under_its_outcome(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    sent_lines = await lines(stores, campaign_id, SENT)
    failed = await lines(stores, campaign_id, FAILED)
    unsent = await lines(stores, campaign_id, UNSENT)
    assert sent_lines == [f"tok-{i:05d}" for i in (*range(10), 10, 12)]
    assert failed == ["tok-00011"]
    assert unsent == [f"tok-{i:05d}" for i in (*range(13, 20), *range(20, 30))]


async def test_final_counts_agree_with_the_audit(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    counts = (await final_counts(stores, stored)).counts
    assert (counts.targeted, counts.sent, counts.failed) == (30, 12, 1)
    unsent = await lines(stores, campaign_id, UNSENT)
    assert counts.targeted - counts.sent - counts.failed == len(unsent)


async def test_paging_stopped_midway_leaves_the_rest_of_the_audience_unsent(stores: Stores) -> None:
    await stores.devices.upsert([device(i, push_enabled=i % 10 != 9) for i in range(100)], utcnow())
    devices = [device_id async for device_id, _ in stores.devices.stream(EVERYONE, None, None)]
    record = campaign(dispatch=Dispatch(owner="d", until=devices[79], next_seq=1),
                      counts=CampaignCounts(targeted=9))
    await stores.campaigns.insert(record)
    await stores.devices.upsert([device(500)], utcnow())  # registered after the claim
    campaign_id = record.id
    await stores.chunks.create(campaign_id, 0, recipients(0, 9), cursor=devices[9],
                               now=utcnow())
    await stores.deliveries.record(campaign_id, 0, "s", sent(*range(4)), utcnow())
    unsent = await lines(stores, campaign_id, UNSENT)
    expected_rest = [f"tok-{i:05d}" for i in range(10, 80) if i % 10 != 9]
    assert unsent == [f"tok-{i:05d}" for i in range(4, 9)] + expected_rest
    counts = (await final_counts(stores, record)).counts
    assert (counts.targeted, counts.sent, counts.failed) == (9 + len(expected_rest), 4, 0)


async def test_a_retarget_source_resumes_inside_the_parents_unsent_list(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    parent = await stores.campaigns.get(campaign_id)
    assert parent is not None
    source = FollowUpSource(stores, parent)
    everything = [(position, r.token) async for position, r in source.stream(after=None)]
    resumed = [(position, r.token) async for position, r in source.stream(after=5)]
    assert [token for _, token in everything] == await lines(stores, campaign_id, UNSENT)
    assert resumed == everything[5:]


async def test_local_time_waves_stream_each_zone_group_when_due(stores: Stores) -> None:
    zones = ["Asia/Seoul", "Europe/Madrid", None, "Mars/Olympus", "Asia/Tokyo"]
    await stores.devices.upsert([device(i, timezone=zones[i % 5]) for i in range(20)], utcnow())
    waves = (Wave(utcnow() - timedelta(seconds=1), ("Asia/Seoul", "Asia/Tokyo"), others=True),
             Wave(utcnow() + timedelta(hours=8), ("Europe/Madrid",), others=False))
    audience = Audience()
    now_source = LocalTimeSource(stores, audience, waves, None, due_by=utcnow())
    first = [(p, r.token) async for p, r in now_source.stream(after=None)]
    everything = [(p, r.token) async for p, r in
                  LocalTimeSource(stores, audience, waves, None, due_by=None).stream(after=None)]
    resumed = [(p, r.token) async for p, r in
               LocalTimeSource(stores, audience, waves, None, due_by=None).stream(after=first[-1][0])]
    madrid = {f"tok-{i:05d}" for i in range(20) if i % 5 == 1}
    assert {token for _, token in first} == {f"tok-{i:05d}" for i in range(20)} - madrid
    assert {p[0] for p, _ in first} == {0}
    assert now_source.next_wave_due() == waves[1].due_at
    assert [token for _, token in everything] == [token for _, token in first] + sorted(madrid)
    assert resumed == everything[len(first):]
