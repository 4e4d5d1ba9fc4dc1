"""Test tiers are chosen by folder: tests/unit, tests/deploy, tests/integration, tests/e2e (markers
follow)."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "deploy", "integration", "e2e")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # The first folder under tests/ only: a checkout under, say, /srv/deploy/ stays untiered.
        folder = Path(str(item.fspath)).resolve().relative_to(TESTS).parts[0]
        if folder in TIERS:
            item.add_marker(getattr(pytest.mark, folder))
