"""The in-memory fakes keep the repositories' contract (``tests/unit/store_contract.py``), and
refuse the query language they do not evaluate rather than guess at it."""

from __future__ import annotations

import pytest

from herald.service_layer.ports import Stores
from tests.unit.fakes import UnsupportedQuery
from tests.unit.store_contract import StoreContract


class TestFakeStores(StoreContract):
    """``stores`` is ``fake_stores()`` (``tests/unit/conftest.py``)."""


@pytest.mark.parametrize("query", [{"$where": "true"}, {"token": {"$regex": "^tok"}},
                                   {"$nor": [{"invalid": False}]}])
async def test_a_query_the_fake_does_not_evaluate_is_refused(stores: Stores,
                                                             query: dict[str, object]) -> None:
    with pytest.raises(UnsupportedQuery):
        [_ async for _ in stores.devices.stream(query, None, None)]
