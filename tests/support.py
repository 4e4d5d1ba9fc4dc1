"""Helpers shared by the integration and end-to-end tiers: unique names, private vhosts, waits.

Every test gets its own MongoDB database and RabbitMQ vhost (and, through the database name, its
own Redis key namespace), so tests never see each other's data, and everything is removed after.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def unique_name(prefix: str = "herald_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _rabbitmqctl(*args: str) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    subprocess.run([*sudo, "rabbitmqctl", "-q", *args], check=True, capture_output=True,
                   timeout=60)


def create_vhost(name: str) -> str:
    """A private RabbitMQ vhost for one test; the URL of guest on it."""
    _rabbitmqctl("add_vhost", name)
    _rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    return f"amqp://guest:guest@127.0.0.1:5672/{name}"


def delete_vhost(name: str) -> None:
    _rabbitmqctl("delete_vhost", name)


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
