"""The fleet gauges the alerts read, on the real stores: nx-27017, Redis and a private vhost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aio_pika
import pytest
from bson import ObjectId
from prometheus_client import REGISTRY

from herald import names
from herald.adapters.fleet_gauges import QueueDepths, ReadyCounts, refresh_fleet_gauges
from herald.adapters.mongo import Database
from herald.adapters.rate_limit import RedisRateLimits
from herald.adapters.records import to_bson
from herald.adapters.redis import RedisCancelFlags, RedisPodRegistry
from herald.clock import utcnow
from herald.domain.documents import Approval, LocalTime
from herald.domain.lanes import Lane
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.service_layer.ports import Stores
from herald.service_layer.stopping import Decider, Settler
from herald.settings import Settings
from tests.factories import actor, campaign

RATE_PER_MIN = 600  # a bucket of 10 tokens, refilled at 10/s


class NoQueues:
    """For tests about MongoDB and Redis only (these run without a broker)."""

    async def ready(self, queue: str) -> int:
        return 0


@pytest.fixture
def keys(settings: Settings) -> RedisKeys:
    return RedisKeys(settings.mongodb_database)


async def refresh(db: Database, redis: Any, keys: RedisKeys,
                  queues: ReadyCounts | None = None, **later: float) -> Any:
    now = utcnow() + timedelta(**later)
    return await refresh_fleet_gauges(db[names.CAMPAIGNS], redis, keys, queues or NoQueues(),
                                      RATE_PER_MIN, now)


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def insert(db: Database, status: Status, **raw: Any) -> str:
    """A campaign document as stored, with ``raw`` fields written as given: the gauges must
    explain what any writer (an operator's script, say) left in the collection."""
    record = campaign(status=status)
    await db[names.CAMPAIGNS].insert_one({**to_bson(record), **raw})
    return record.id


async def test_unfinished_campaigns_and_the_chunks_senders_owe(
        db: Database, stores: Stores, redis: Any, keys: RedisKeys) -> None:
    await insert(db, Status.IN_PROGRESS, progress={"chunks_published": 10, "chunks_done": 4})
    # A local-time campaign parked between two waves: in progress, nothing owed.
    await insert(db, Status.IN_PROGRESS, progress={"chunks_published": 5, "chunks_done": 5})
    for status in (Status.SCHEDULED, Status.SCHEDULED, Status.COMPLETED, Status.CANCELLED):
        await insert(db, status, cancel={"requested_at": utcnow()})

    reading = await refresh(db, redis, keys)

    assert reading.campaigns == {"awaiting_approval": 0, "scheduled": 2, "pending": 0,
                                 "in_progress": 2, "finalizing": 0, "cancelling": 0,
                                 "paused": 0}
    assert reading.chunks_unfinished == 6
    assert reading.cancelling_oldest_s == 0.0
    assert reading.cancellations_without_request == 0
    assert gauge("herald_campaigns", status="in_progress") == 2
    assert gauge("herald_campaigns", status="completed") is None  # finished ones are not gauged
    assert gauge("herald_chunks_unfinished") == 6


async def test_a_real_cancel_is_explained_and_aged_from_its_request(
        db: Database, stores: Stores, redis: Any, keys: RedisKeys) -> None:
    campaign_id = await insert(db, Status.IN_PROGRESS)
    registry = RedisPodRegistry(redis, keys, 5)
    decider = Decider(stores, RedisCancelFlags(redis, keys, 60), registry, None,
                      Settler(stores, registry, "test-pod").settle)
    outcome = await decider.cancel(campaign_id, "broken link", actor("lead"))
    assert outcome.status is Status.CANCELLING
    assert await RedisCancelFlags(redis, keys, 60).is_raised(campaign_id)

    reading = await refresh(db, redis, keys, seconds=90)

    assert reading.campaigns["cancelling"] == 1
    assert 89.0 <= reading.cancelling_oldest_s <= 95.0
    assert gauge("herald_campaign_cancelling_oldest_seconds") == reading.cancelling_oldest_s
    assert reading.cancellations_without_request == 0


async def test_cancellations_no_request_explains_are_counted(
        db: Database, stores: Stores, redis: Any, keys: RedisKeys) -> None:
    expected = {
        await insert(db, Status.CANCELLED),  # no cancel record at all
        await insert(db, Status.CANCELLED, cancel={"reason": "set by hand"}),
        await insert(db, Status.CANCELLING),
    }
    flagged = await insert(db, Status.IN_PROGRESS)  # senders would drop it: a false cancel
    expected.add(flagged)
    await insert(db, Status.CANCELLED, cancel={"requested_at": utcnow()})  # explained
    flags = RedisCancelFlags(redis, keys, 60)
    await flags.raise_flag(flagged)
    await flags.raise_flag("65f000000000000000000000")  # no such campaign: stops nothing
    await flags.raise_flag("not-an-object-id")

    reading = await refresh(db, redis, keys)

    assert set(reading.without_request_ids) == expected
    assert reading.cancellations_without_request == 4
    assert gauge("herald_cancellations_without_request") == 4
    assert reading.cancelling_oldest_s >= 0.0  # aged from updated_at, since no request says


async def test_the_fcm_bucket_ratio_reads_the_senders_bucket(redis: Any, keys: RedisKeys,
                                                             db: Database) -> None:
    assert (await refresh(db, redis, keys)).fcm_quota_available_ratio == 1.0  # never used
    bucket = RedisRateLimits(redis, keys, RATE_PER_MIN / 60).project
    assert await bucket.take(10) == 10  # the whole second's worth

    emptied = (await refresh(db, redis, keys)).fcm_quota_available_ratio

    await bucket.penalize(5.0)  # a 429 with Retry-After: 5
    paused = (await refresh(db, redis, keys)).fcm_quota_available_ratio
    assert 0.0 <= emptied <= 0.5, emptied  # refills at 10/s: a few tokens back at most
    assert paused <= -4.0, paused
    assert gauge("herald_fcm_quota_available_ratio") == paused


@pytest.fixture
async def channel(vhost: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    connection = await aio_pika.connect(vhost)
    channel = await connection.channel(publisher_confirms=True)
    yield channel
    await connection.close()


async def test_queue_depth_is_the_live_ready_count(
        vhost: str, channel: aio_pika.abc.AbstractChannel) -> None:
    await channel.declare_queue(names.CHUNKS_QUEUE, durable=True,
                                arguments={"x-queue-type": "quorum"})
    for n in range(3):
        await channel.default_exchange.publish(aio_pika.Message(b"%d" % n),
                                               routing_key=names.CHUNKS_QUEUE)
    depths = QueueDepths(vhost)
    try:
        assert await depths.ready(names.CHUNKS_QUEUE) == 3  # at once, not after a stats tick
        queue = await channel.get_queue(names.CHUNKS_QUEUE, ensure=False)
        taken = await queue.get(no_ack=False)
        assert taken is not None
        assert await depths.ready(names.CHUNKS_QUEUE) == 2  # unacknowledged is not ready
        assert await depths.ready(names.DEAD_MESSAGES_QUEUE) == 0  # not declared in this vhost
        assert await depths.ready(names.CHUNKS_QUEUE) == 2  # the reader survives the 404
    finally:
        await depths.close()


async def test_refresh_reports_every_watched_queue(
        db: Database, redis: Any, keys: RedisKeys, vhost: str,
        channel: aio_pika.abc.AbstractChannel) -> None:
    await channel.declare_queue(names.DISPATCH_QUEUE, durable=True,
                                arguments={"x-queue-type": "quorum"})
    await channel.default_exchange.publish(aio_pika.Message(b"{}"),
                                           routing_key=names.DISPATCH_QUEUE)
    depths = QueueDepths(vhost)
    try:
        before_s = utcnow().timestamp()
        reading = await refresh(db, redis, keys, depths)
    finally:
        await depths.close()
    assert reading.queues_ready == {**{queue: 0 for queue in names.CHUNK_QUEUES.values()},
                                    names.DISPATCH_QUEUE: 1, names.DEAD_CHUNKS_QUEUE: 0,
                                    names.DEAD_MESSAGES_QUEUE: 0, names.DEAD_CANCELS_QUEUE: 0}
    assert gauge("herald_queue_messages_ready", queue=names.DISPATCH_QUEUE) == 1
    refreshed = gauge("herald_fleet_gauges_refreshed_timestamp_seconds")
    assert refreshed is not None and refreshed >= before_s - 1


async def test_the_longest_wait_for_a_first_request_by_lane(
        db: Database, redis: Any, keys: RedisKeys) -> None:
    """Issue 29: a due campaign with no FCM request yet waits since it was due, or since it
    was approved if that came later; one that had its request, one not due yet, one paused
    and one sent in local time wait for nothing the gauge should show; 0 for an idle lane."""
    now = utcnow()
    due = {"due_at": now - timedelta(seconds=40)}
    waiting = [
        campaign(status=Status.PENDING, lane=Lane.URGENT, **due),
        campaign(status=Status.IN_PROGRESS, lane=Lane.URGENT, due_at=now - timedelta(seconds=7)),
        campaign(status=Status.PENDING, lane=Lane.BULK, approvals=(
            Approval(digest="d", by=actor("reviewer"), at=now - timedelta(seconds=12)),), **due),
        campaign(status=Status.IN_PROGRESS, first_request_at=now, **due),
        campaign(status=Status.PENDING, due_at=now + timedelta(seconds=60)),
        campaign(status=Status.PAUSED, **due),
        campaign(status=Status.PENDING, local_time=LocalTime("09:00", "Asia/Seoul"), **due),
    ]
    for record in waiting:
        await db[names.CAMPAIGNS].insert_one(to_bson(record))
    # Stored before campaigns had the field: missing is null to the query.
    await db[names.CAMPAIGNS].update_one({"_id": ObjectId(waiting[1].id)},
                                         {"$unset": {"first_request_at": ""}})

    reading = await refresh(db, redis, keys)

    assert reading.first_request_wait_s["urgent"] == pytest.approx(40, abs=2)
    assert reading.first_request_wait_s["bulk"] == pytest.approx(12, abs=2)
    assert reading.first_request_wait_s["standard"] == 0
    assert gauge("herald_first_request_wait_seconds", lane="urgent") == pytest.approx(40, abs=2)
    assert gauge("herald_first_request_wait_seconds", lane="standard") == 0
