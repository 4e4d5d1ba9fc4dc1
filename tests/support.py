"""Helpers shared by the integration and end-to-end tiers: unique names, private vhosts, waits.

Every test gets its own MongoDB database and RabbitMQ vhost (and, through the database name, its
own Redis key namespace), so tests never see each other's data, and everything is removed after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from devstack.isolation import create_vhost, delete_vhost, unique_name

__all__ = ["create_vhost", "delete_vhost", "unique_name", "wait_for"]

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str,
             interval_s: float = 0.05) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
