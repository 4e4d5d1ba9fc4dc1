"""The audit and the final counts are computed from the same records, on the MongoDB wire server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.service_layer.recipients import (
    FAILED,
    SENT,
    UNSENT,
    LocalTimeSource,
    UnsentOf,
    audit,
    final_counts,
)
from tests.integration.test_campaign_store import campaign
from tests.integration.test_devices import device


def recipients(first: int, last: int) -> list[dict[str, Any]]:
    return [{"token": f"tok-{i:05d}", "user_id": f"u{i}"} for i in range(first, last)]


def sent(*positions: int) -> list[tuple[int, str | None]]:
    return [(position, None) for position in positions]


async def lines(stores: Stores, campaign_id: str, outcome: str) -> list[str]:
    stored = await stores.campaigns.get(campaign_id)
    assert stored is not None
    return [line.token async for line in audit(stores, stored, outcome)]


async def paged_campaign(stores: Stores) -> str:
    """Three chunks of 10: the first fully recorded (one token twice), the second partly."""
    document = campaign(status="in_progress", dispatch={"owner": "d", "lease_until": None, "until": None,
                                  "next_seq": 3, "done": True, "takeovers": 0},
                        counts={"targeted": 30, "sent": 0, "failed": 0})  # as checkpointed
    await stores.campaigns.insert(document)
    campaign_id, now = str(document["_id"]), utcnow()
    for seq in range(3):
        await stores.chunks.create(campaign_id, seq, recipients(10 * seq, 10 * seq + 10),
                                   cursor=None, now=now)
    await stores.deliveries.record(campaign_id, 0, "s1", sent(*range(6)), now)
    await stores.deliveries.record(campaign_id, 0, "s2", sent(*range(5, 10)), now)  # 5 twice
    await stores.deliveries.record(campaign_id, 1, "s1",
                                   [(0, None), (1, "UNREGISTERED"), (2, None)], now)
    return campaign_id


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
    counts = await final_counts(stores, stored)
    assert (counts.targeted, counts.sent, counts.failed) == (30, 12, 1)
    unsent = await lines(stores, campaign_id, UNSENT)
    assert counts.targeted - counts.sent - counts.failed == len(unsent)


async def test_paging_stopped_midway_leaves_the_rest_of_the_audience_unsent(stores: Stores) -> None:
    await stores.devices.upsert([device(i, push_enabled=i % 10 != 9) for i in range(100)], utcnow())
    devices = [d async for d in stores.devices.stream({}, None, None)]
    document = campaign(dispatch={"owner": "d", "lease_until": None, "until": devices[79]["_id"],
                                  "next_seq": 1, "done": False, "takeovers": 0},
                        counts={"targeted": 9, "sent": 0, "failed": 0})
    await stores.campaigns.insert(document)
    await stores.devices.upsert([device(500)], utcnow())  # registered after the claim
    campaign_id = str(document["_id"])
    await stores.chunks.create(campaign_id, 0, recipients(0, 9), cursor=devices[9]["_id"],
                               now=utcnow())
    await stores.deliveries.record(campaign_id, 0, "s", sent(*range(4)), utcnow())
    unsent = await lines(stores, campaign_id, UNSENT)
    expected_rest = [f"tok-{i:05d}" for i in range(10, 80) if i % 10 != 9]
    assert unsent == [f"tok-{i:05d}" for i in range(4, 9)] + expected_rest
    counts = await final_counts(stores, document)
    assert (counts.targeted, counts.sent, counts.failed) == (9 + len(expected_rest), 4, 0)


async def test_a_retarget_source_resumes_inside_the_parents_unsent_list(stores: Stores) -> None:
    campaign_id = await paged_campaign(stores)
    parent = await stores.campaigns.get(campaign_id)
    assert parent is not None
    source = UnsentOf(stores, parent)
    everything = [(position, r["token"]) async for position, r in source.stream(after=None)]
    resumed = [(position, r["token"]) async for position, r in source.stream(after=5)]
    assert [token for _, token in everything] == await lines(stores, campaign_id, UNSENT)
    assert resumed == everything[5:]


async def test_local_time_waves_stream_each_zone_group_when_due(stores: Stores) -> None:
    zones = ["Asia/Seoul", "Europe/Madrid", None, "Mars/Olympus", "Asia/Tokyo"]
    await stores.devices.upsert([device(i, timezone=zones[i % 5]) for i in range(20)], utcnow())
    waves = [{"due_at": utcnow() - timedelta(seconds=1), "zones": ["Asia/Seoul", "Asia/Tokyo"],
              "others": True},
             {"due_at": utcnow() + timedelta(hours=8), "zones": ["Europe/Madrid"],
              "others": False}]
    audience = Audience()
    now_source = LocalTimeSource(stores, audience, waves, None, due_by=utcnow())
    first = [(p, r["token"]) async for p, r in now_source.stream(after=None)]
    everything = [(p, r["token"]) async for p, r in
                  LocalTimeSource(stores, audience, waves, None, due_by=None).stream(after=None)]
    resumed = [(p, r["token"]) async for p, r in
               LocalTimeSource(stores, audience, waves, None, due_by=None).stream(after=first[-1][0])]
    madrid = {f"tok-{i:05d}" for i in range(20) if i % 5 == 1}
    assert {token for _, token in first} == {f"tok-{i:05d}" for i in range(20)} - madrid
    assert {p[0] for p, _ in first} == {0}
    assert now_source.next_wave_due() == waves[1]["due_at"]
    assert [token for _, token in everything] == [token for _, token in first] + sorted(madrid)
    assert resumed == everything[len(first):]
