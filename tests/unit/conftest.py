"""Unit-tier fixtures: a fresh in-memory stack per test (``tests/unit/fakes.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.service_layer.ports import Stores
from tests.unit.fakes import (
    FakeBackground,
    FakeBus,
    FakeClock,
    FakeFlags,
    FakeRegistry,
    fake_stores,
)

# The contract's assertions live outside a test module: pytest explains their failures too.
pytest.register_assert_rewrite("tests.unit.store_contract", "tests.unit.cap_contract")


@pytest.fixture
def stores() -> Stores:
    return fake_stores()


@pytest.fixture
def bus() -> FakeBus:
    return FakeBus()


@pytest.fixture
def flags() -> FakeFlags:
    return FakeFlags()


@pytest.fixture
def background() -> Iterator[FakeBackground]:
    held = FakeBackground()
    yield held
    held.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock: FakeClock) -> FakeRegistry:
    """Heartbeats stamped with ``clock``: a test moves it on to make a beat a later one."""
    return FakeRegistry(clock.epoch_s)
