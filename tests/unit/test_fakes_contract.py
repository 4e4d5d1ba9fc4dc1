"""The in-memory fakes keep the repositories' contract (``tests/unit/store_contract.py``)."""

from __future__ import annotations

from tests.unit.store_contract import StoreContract


class TestFakeStores(StoreContract):
    """``stores`` is ``fake_stores()`` (``tests/unit/conftest.py``)."""
