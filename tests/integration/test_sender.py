"""A sender pod, in this process, against real RabbitMQ, Redis, the MongoDB wire server and the
FCM emulator: chunks in, FCM requests out, outcomes recorded, campaigns completed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aio_pika
import pytest

from fcm_emulator.client import EmulatorClient
from herald import names
from herald.clock import utcnow
from herald.contracts.http import DeviceIn
from herald.domain.documents import Campaign, CampaignCounts, ChunkStatus
from herald.domain.messages import Recipient, SendChunk
from herald.domain.payload import web_push_topic
from herald.domain.pods import PodBeat
from herald.domain.status import Status, Verdict
from herald.observability import CHUNKS, CHUNKS_DEFERRED
from herald.runtime.worker import PodParts, running_pod
from herald.service_layer.sending.dead_chunks import DEAD_LETTERED
from herald.settings import Settings
from services.sender.main import compose
from tests.factories import at, publish_chunks, sending_campaign
from tests.support import eventually


@pytest.fixture
async def sender(broker_settings: Settings, db: Any, redis: Any) -> AsyncIterator[PodParts]:
    async with running_pod("sender", broker_settings, acknowledges_cancels=True,
                           compose=compose) as (parts, _):
        yield parts


async def die_holding(pod: PodParts, campaign_id: str, seq: int) -> None:
    """What a sender killed while sending leaves behind: an attempt, and a hold on the chunk."""
    chunks = pod.resources.stores.chunks
    state = await chunks.state(campaign_id, seq)
    assert state is not None
    await chunks.claim(campaign_id, seq, "dead-sender", state.owner, utcnow() + timedelta(minutes=5))


async def finished(pod: PodParts, campaign_id: str,
                   status: Status = Status.COMPLETED) -> Campaign | None:
    stored = await pod.resources.stores.campaigns.get(campaign_id)
    return stored if stored and stored.status is status else None


async def test_chunks_are_sent_recorded_and_complete_the_campaign(
        sender: PodParts, emulator: EmulatorClient) -> None:
    chunks = [[f"ok-{s}-{i}" for i in range(300)] + [f"unregistered-{s}", f"invalid-{s}"]
              for s in range(3)]
    stores = sender.resources.stores
    document = await sending_campaign(stores, chunks)
    await stores.devices.upsert(
        [DeviceIn(token=t, platform="ios") for chunk in chunks for t in chunk], utcnow())
    await publish_chunks(sender.resources.bus, document, chunks)
    done = await eventually(lambda: finished(sender, document.id))
    received = emulator.received()
    assert sorted(r.token for r in received) == sorted(t for chunk in chunks for t in chunk)
    assert done.counts == CampaignCounts(targeted=906, sent=900, failed=6)
    dead = await stores.devices.find_by_token("unregistered-1")
    alive = await stores.devices.find_by_token("ok-1-1")
    assert dead is not None and dead.invalid and dead.invalid_reason == "UNREGISTERED"
    assert alive is not None and not alive.invalid


async def test_a_redelivered_chunk_skips_what_was_already_recorded(
        sender: PodParts, emulator: EmulatorClient) -> None:
    chunks = [[f"tok-{i}" for i in range(100)]]
    document = await sending_campaign(sender.resources.stores, chunks)
    campaign_id = document.id
    await die_holding(sender, campaign_id, 0)  # an earlier attempt died...
    await sender.resources.stores.deliveries.record(  # ...after recording one batch
        campaign_id, 0, "dead-pod", at([(position, None) for position in range(40)]), utcnow())
    await publish_chunks(sender.resources.bus, document, chunks)
    done = await eventually(lambda: finished(sender, campaign_id))
    assert sorted(r.token for r in emulator.received()) == sorted(f"tok-{i}" for i in range(40, 100))
    assert done.counts.sent == 100


async def test_a_chunk_held_by_another_live_sender_waits_for_it(
        sender: PodParts, emulator: EmulatorClient) -> None:
    """Two copies of one chunk message (a dispatcher died between publishing and checkpointing)
    are never sent at once: the copy that finds the chunk held by a live sender waits."""
    chunks = [[f"tok-{i}" for i in range(30)]]
    stores = sender.resources.stores
    document = await sending_campaign(stores, chunks)
    campaign_id = document.id
    other = PodBeat(id="other-sender", service="sender", host="h", pid=1, version="t",
                    started_at=0.0)
    await sender.resources.registry.beat(other)
    await stores.chunks.claim(campaign_id, 0, "other-sender", None,
                              utcnow() + timedelta(minutes=5))
    deferred = CHUNKS_DEFERRED._value.get()
    await publish_chunks(sender.resources.bus, document, chunks)

    async def waited() -> bool:
        return bool(CHUNKS_DEFERRED._value.get() > deferred)

    await eventually(waited)
    assert emulator.received() == []
    await stores.chunks.release(campaign_id, 0, "other-sender", refund=True)
    await eventually(lambda: finished(sender, campaign_id))
    assert sorted(r.token for r in emulator.received()) == sorted(chunks[0])


async def test_flaky_tokens_are_retried_until_fcm_accepts_them(
        sender: PodParts, emulator: EmulatorClient) -> None:
    chunks = [[f"flaky-{i}" for i in range(20)] + [f"fine-{i}" for i in range(20)]]
    document = await sending_campaign(sender.resources.stores, chunks)
    await publish_chunks(sender.resources.bus, document, chunks)
    done = await eventually(lambda: finished(sender, document.id))
    by_error = emulator.stats()["by_error"]
    assert by_error == {"UNAVAILABLE": 20, "OK": 40}
    assert done.counts.sent == 40 and done.counts.failed == 0


async def test_a_chunk_of_a_cancelled_campaign_is_dropped_unsent(
        sender: PodParts, emulator: EmulatorClient) -> None:
    chunks = [[f"tok-{i}" for i in range(50)]]
    stores = sender.resources.stores
    document = await sending_campaign(stores, chunks)
    await sender.resources.flags.raise_flag(document.id)
    dropped = CHUNKS.labels("dropped")._value.get()
    await publish_chunks(sender.resources.bus, document, chunks)

    async def was_dropped() -> bool:
        return bool(CHUNKS.labels("dropped")._value.get() > dropped)

    await eventually(was_dropped, what="the chunk to be dropped")
    chunk = await stores.chunks.state(document.id, 0)
    assert emulator.received() == []
    assert chunk is not None and chunk.status is ChunkStatus.PENDING and chunk.attempts == 0


async def test_a_redelivered_chunk_of_a_campaign_cancelled_while_this_pod_was_away_is_dropped(
        sender: PodParts, emulator: EmulatorClient) -> None:
    """No broadcast reached this pod and no flag is set: the campaign's status still stops it."""
    chunks = [[f"tok-{i}" for i in range(50)]]
    document = await sending_campaign(sender.resources.stores, chunks, status=Status.CANCELLING)
    await die_holding(sender, document.id, 0)  # a dead sender's attempt
    await publish_chunks(sender.resources.bus, document, chunks)

    async def learned() -> bool:
        return sender.view.known(document.id) is Verdict.STOP

    await eventually(learned)
    assert emulator.received() == []


async def test_a_chunk_failing_too_often_is_dead_lettered_and_the_campaign_fails_retryably(
        sender: PodParts, emulator: EmulatorClient) -> None:
    chunks = [[f"tok-{i}" for i in range(30)], [f"other-{i}" for i in range(30)]]
    stores = sender.resources.stores
    document = await sending_campaign(stores, chunks)
    campaign_id = document.id
    for _ in range(sender.settings.chunk_max_attempts):
        await die_holding(sender, campaign_id, 0)
    await publish_chunks(sender.resources.bus, document, chunks)
    done = await eventually(lambda: finished(sender, campaign_id, Status.FAILED))
    failed = [d async for d in stores.deliveries.in_order(campaign_id) if d.seq == 0]
    assert done.counts == CampaignCounts(targeted=60, sent=30, failed=30)
    assert done.error is not None
    assert "30 recipients failed for reasons other than their token" in done.error
    assert {f.error for d in failed for f in d.failed} == {DEAD_LETTERED}
    assert sorted(r.token for r in emulator.received()) == sorted(chunks[1])


async def test_a_malformed_chunk_message_is_dead_lettered_not_lost(
        sender: PodParts, vhost: str) -> None:
    connection = await aio_pika.connect(vhost)
    async with connection:
        channel = await connection.channel()
        await channel.default_exchange.publish(aio_pika.Message(b'{"campaign_id": 12}'),
                                               routing_key=names.CHUNKS_QUEUE)
        dead = await channel.get_queue(names.DEAD_MESSAGES_QUEUE, ensure=False)

        async def arrived() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await dead.get(fail=False, no_ack=True)

        message = await eventually(arrived)
    assert message.body == b'{"campaign_id": 12}'


async def test_a_chunk_longer_than_its_budget_is_handed_on_and_never_held_for_long(
        broker_settings: Settings, db: Any, redis: Any, emulator: EmulatorClient) -> None:
    """RabbitMQ closes a channel whose delivery stays unacknowledged past consumer_timeout
    (30 min by default). A chunk that runs over ``HERALD_CHUNK_BUDGET_S`` records what it sent,
    republishes itself and acknowledges the delivery; the next delivery carries on."""
    # Without the device pace: a target admitted when the budget runs out keeps its device's
    # moment, so at a budget ten times shorter than the pace's interval (0.05 s against 0.5 s)
    # the next deliveries hand the chunk on again and again before that moment comes.
    settings = broker_settings.model_copy(update={"chunk_budget_s": 0.05, "sender_batch_size": 50,
                                                  "device_rate_per_min": 0})
    async with running_pod("sender", settings, acknowledges_cancels=True,
                           compose=compose) as (pod, _):
        stores = pod.resources.stores
        emulator.configure(latency_ms=60)
        chunks = [[f"tok-{i}" for i in range(200)]]
        document = await sending_campaign(stores, chunks)
        await publish_chunks(pod.resources.bus, document, chunks)
        done = await eventually(lambda: finished(pod, document.id), timeout_s=30)
        deliveries = [d async for d in stores.deliveries.in_order(document.id)]
        chunk = await stores.chunks.state(document.id, 0)
    assert sorted(r.token for r in emulator.received()) == sorted(chunks[0])
    assert done.counts.sent == 200
    # Over budget after its first round trip, each delivery sends at most one batch (50 started
    # and unrecorded), written in groups of 50 // 4.
    assert sum(len(d.sent) for d in deliveries) == 200
    assert all(len(d.sent) <= 12 for d in deliveries) and len(deliveries) >= 200 // 12
    assert chunk is not None
    assert chunk.attempts == 1, "handing a chunk on is not a failed attempt"


async def test_a_dead_lettered_chunk_still_held_by_a_live_sender_waits_for_it(
        sender: PodParts, emulator: EmulatorClient) -> None:
    """The broker's own delivery limit can dead-letter a chunk that a live sender is sending:
    its rest is recorded failed only once that sender lets it go, never over its outcomes."""
    chunks = [[f"tok-{i}" for i in range(20)]]
    stores = sender.resources.stores
    document = await sending_campaign(stores, chunks)
    campaign_id = document.id
    await sender.resources.registry.beat(PodBeat(id="other-sender", service="sender", host="h",
                                                 pid=1, version="t", started_at=0.0))
    await stores.chunks.claim(campaign_id, 0, "other-sender", None,
                              utcnow() + timedelta(minutes=5))
    await stores.deliveries.record(campaign_id, 0, "other-sender",
                                   at([(p, None) for p in range(8)]), utcnow())
    deferred = CHUNKS_DEFERRED._value.get()
    message = SendChunk(campaign_id=campaign_id, seq=0,
                        recipients=[Recipient(token=t) for t in chunks[0]])
    await sender.resources.bus.dead_letter(message.model_dump_json().encode(),
                                           names.DEAD_CHUNKS_ROUTING_KEY)

    async def handed_back() -> bool:
        return bool(CHUNKS_DEFERRED._value.get() > deferred)

    await eventually(handed_back)
    held = await stores.chunks.state(campaign_id, 0)
    assert held is not None
    assert (held.status, held.owner) == (ChunkStatus.PENDING, "other-sender")
    await stores.chunks.release(campaign_id, 0, "other-sender", refund=False)
    failed = await eventually(lambda: finished(sender, campaign_id, Status.FAILED))
    assert failed.counts == CampaignCounts(targeted=20, sent=8, failed=12)



@pytest.mark.parametrize("named", [None, "promo:2026.11"])
async def test_every_request_of_a_campaign_carries_its_replacement_key(
        sender: PodParts, emulator: EmulatorClient, named: str | None) -> None:
    """By default the key is ``herald-<campaign id>``; a campaign's own key replaces it."""
    chunks = [[f"tok-{seq}-{i}" for i in range(150)] for seq in range(2)]
    document = await sending_campaign(sender.resources.stores, chunks, replace_key=named)
    await publish_chunks(sender.resources.bus, document, chunks)
    done = await eventually(lambda: finished(sender, document.id))
    key = named or f"herald-{document.id}"
    received = emulator.received()
    assert sorted(r.token for r in received) == sorted(t for chunk in chunks for t in chunk), (
        done.counts, emulator.stats())
    assert {(r.android_tag, r.android_collapse_key, r.apns_collapse_id, r.webpush_tag)
            for r in received} == {(key, key, key, key)}
    assert {r.webpush_topic for r in received} == {key if named is None else web_push_topic(key)}
    assert all(r.accepted for r in received)
