"""The repositories' contract (``tests/unit/store_contract.py``), on the MongoDB wire server: the
same assertions the in-memory fakes of the unit tier are held to, so a use case tested on the
fakes behaves the same on the real stores."""

from __future__ import annotations

import pytest

from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.audience import AttributeFilter, Audience
from herald.service_layer.ports import Stores
from tests.factories import device

pytest.register_assert_rewrite("tests.unit.store_contract")

from tests.unit.store_contract import StoreContract  # noqa: E402


class TestMongoStores(StoreContract):
    """``stores`` is ``mongo_stores(db)`` on a fresh database (``tests/integration/conftest.py``)."""

    async def test_a_boolean_attribute_is_not_the_number_one(self, stores: Stores,
                                                             db: Database) -> None:
        """MongoDB keeps ``true`` and ``1`` apart; nx-27017 (SQLite underneath) stores both as
        1, so there an ``eq: 1`` filter also selects ``true`` (docs/mongodb-stand-in.md)."""
        if (await db.client.admin.command("buildInfo")).get("process") != "nx_27017":
            await super().test_a_boolean_attribute_is_not_the_number_one(stores)
            return
        await stores.devices.upsert([device(0, attributes={"vip": True}),
                                     device(1, attributes={"vip": 1})], utcnow())
        query = Audience(attributes={"vip": AttributeFilter(eq=1)})
        found = [r.token async for _, r in stores.devices.stream(query, None, None)]
        assert found == ["tok-00000", "tok-00001"]
