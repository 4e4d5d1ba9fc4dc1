"""The frequency cap on real Redis (issue 32, point 2): the Lua script keeps the store's contract
(``tests/unit/cap_contract.py``, the assertions the unit tier's fake is held to), and two
campaigns sent to the same 2,000 people at the same instant by two sender pods (this process,
real RabbitMQ, Redis, nx-27017 and the FCM emulator), with ``HERALD_MARKETING_CAP=1/24h``:
every person gets exactly one of them, the other records them ``suppressed``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import pytest

from fcm_emulator.client import EmulatorClient
from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.clock import utcnow
from herald.domain.documents import Campaign, Outcome
from herald.domain.messages import Recipient, SendChunk
from herald.domain.purpose import Purpose
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.runtime.worker import PodParts, running_pod
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import audit
from herald.settings import Settings
from services.sender.main import compose
from tests.factories import campaign, paged
from tests.support import eventually

pytest.register_assert_rewrite("tests.unit.cap_contract")

from tests.unit.cap_contract import CapContract, rule, sends  # noqa: E402

PEOPLE = 2_000
CHUNK = 500


class TestRedisFrequencyCaps(CapContract):
    @pytest.fixture
    def caps(self, redis: Any, settings: Settings) -> RedisFrequencyCaps:
        return RedisFrequencyCaps(redis, RedisKeys(settings.mongodb_database))


async def test_a_person_is_kept_for_the_longest_window_then_expires(
        redis: Any, settings: Settings) -> None:
    caps = RedisFrequencyCaps(redis, RedisKeys(settings.mongodb_database))
    await caps.admit("a" * 24, rule("1/1h,2/7d"), {"u:1": sends("a" * 24, 0)})
    ttl_ms = await redis.pttl(caps.key("u:1"))
    assert 7 * 86_400_000 - 5_000 < ttl_ms <= 7 * 86_400_000
    assert "u:1" not in caps.key("u:1")  # a digest names the person, not their user id


async def test_two_campaigns_to_the_same_2000_people_at_once_reach_each_person_once(
        broker_settings: Settings, stores: Stores, redis: Any, emulator: EmulatorClient) -> None:
    capped = broker_settings.model_copy(update={"marketing_cap": "1/24h"})
    async with contextlib.AsyncExitStack() as pods:
        first, _ = await pods.enter_async_context(
            running_pod("sender", capped, acknowledges_cancels=True, compose=compose))
        await pods.enter_async_context(
            running_pod("sender", capped, acknowledges_cancels=True, compose=compose))
        tag = broker_settings.mongodb_database
        people = [Recipient(token=f"cap-{tag}-{i}", user_id=f"person-{i}") for i in range(PEOPLE)]
        # The second campaign groups the same people otherwise: each of its chunks meets
        # every chunk of the first.
        a = await _sending(stores, [people[k:k + CHUNK] for k in range(0, PEOPLE, CHUNK)])
        b = await _sending(stores, [people[k::PEOPLE // CHUNK] for k in range(PEOPLE // CHUNK)])
        started = time.monotonic()
        await asyncio.gather(*(_publish(first, c) for pair in zip(a, b, strict=True)
                               for c in pair))
        done = [await eventually(lambda c=c: _completed(stores, c[0].campaign_id),
                                 timeout_s=60) for c in (a, b)]
        took_s = time.monotonic() - started
    received = Counter(r.token for r in emulator.received() if r.token.startswith("cap-"))
    assert len(received) == PEOPLE and set(received.values()) == {1}  # each person once
    sent = [{line.user_id async for line in audit(stores, c, Outcome.SENT)} for c in done]
    held = [[line async for line in audit(stores, c, Outcome.SUPPRESSED)] for c in done]
    assert sent[0] | sent[1] == {p.user_id for p in people} and not sent[0] & sent[1]
    for index, c in enumerate(done):
        counts = c.counts
        assert (counts.targeted, counts.failed, counts.unsent) == (PEOPLE, 0, 0)
        assert counts.sent + counts.suppressed == PEOPLE
        assert {line.user_id for line in held[index]} == {p.user_id for p in people} - sent[index]
        assert {line.rule for line in held[index]} <= {"frequency_cap"}
    print(f"two campaigns of {PEOPLE} sent at once: {done[0].counts.sent} and "
          f"{done[1].counts.sent} sent, {took_s:.2f} s")


async def _sending(stores: Stores, chunks: list[list[Recipient]]) -> list[SendChunk]:
    """A marketing campaign as its dispatcher leaves it (paged, chunks written); its chunk
    messages, not yet published."""
    record = campaign(**paged(len(chunks), sum(map(len, chunks))), purpose=Purpose.MARKETING)
    await stores.campaigns.insert(record)
    for seq, recipients in enumerate(chunks):
        await stores.chunks.create(record.id, seq, recipients, None, utcnow())
    return [SendChunk(campaign_id=record.id, seq=seq, recipients=recipients)
            for seq, recipients in enumerate(chunks)]


async def _publish(pod: PodParts, chunk: SendChunk) -> None:
    await pod.resources.bus.send_chunk(chunk)


async def _completed(stores: Stores, campaign_id: str) -> Campaign | None:
    found = await stores.campaigns.get(campaign_id)
    return found if found is not None and found.status is Status.COMPLETED else None
