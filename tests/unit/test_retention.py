"""What only served for a while goes (``herald/service_layer/retention.py``), on fakes."""

from __future__ import annotations

from datetime import timedelta

from herald.clock import utcnow
from herald.domain.documents import IdempotencyBinding, TestSend, new_id
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from herald.service_layer.retention import Retention, RetentionPolicy
from tests.factories import actor

POLICY = RetentionPolicy(idempotency_ttl=timedelta(hours=24), test_sends_kept=timedelta(days=90))


async def test_keys_go_after_a_day_test_sends_after_ninety_and_the_rest_stays(
        stores: Stores) -> None:
    now = utcnow()
    for key, age in (("stale", timedelta(hours=25)), ("fresh", timedelta(hours=23))):
        await stores.idempotency.reserve(IdempotencyBinding(key, "f", new_id(), now - age))
    for age in (timedelta(days=91), timedelta(days=89)):
        await stores.test_sends.insert(TestSend(id=new_id(), campaign_id="c", at=now - age,
                                                by=actor("ops"), status=Status.PENDING,
                                                outcomes=()))
    retention = Retention(stores.idempotency, stores.test_sends, POLICY)
    await retention.recover(now)
    assert await stores.idempotency.reserve(IdempotencyBinding("stale", "g", new_id(), now)
                                            ) is None
    assert await stores.idempotency.reserve(IdempotencyBinding("fresh", "g", new_id(), now)
                                            ) is not None
    assert len(await stores.test_sends.of_campaign("c")) == 1


async def test_it_runs_at_most_every_few_minutes(stores: Stores) -> None:
    retention = Retention(stores.idempotency, stores.test_sends, POLICY)
    await retention.recover(utcnow())
    old = utcnow() - timedelta(days=2)
    await stores.idempotency.reserve(IdempotencyBinding("k", "f", new_id(), old))
    await retention.recover(utcnow())  # too soon: nothing looked at
    assert await stores.idempotency.reserve(IdempotencyBinding("k", "g", new_id(), old)
                                            ) is not None
