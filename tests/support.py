"""Helpers shared by the integration and end-to-end tiers: unique names, private vhosts, and
waiting for a condition with a deadline (never a bare sleep that hopes).

Every test gets its own MongoDB database and RabbitMQ vhost (and, through the database name, its
own Redis key namespace), so tests never see each other's data, and everything is removed after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx

from devstack.isolation import unique_name
from devstack.processes import free_port

__all__ = ["error_code", "eventually", "unique_name", "wait_for"]

T = TypeVar("T")

POLL_S = 0.05


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str,
             interval_s: float = POLL_S) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout_s: float = 10.0,
                     what: str = "the condition", interval_s: float = POLL_S) -> T:
    """The asynchronous ``wait_for``: await ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


def error_code(response: httpx.Response) -> str:
    """The machine-readable code of an API error, checking the error's shape on the way."""
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["message"]
    return str(body["error"]["code"])


@contextmanager
def s3_server() -> Iterator[str]:
    """A real S3-compatible server (moto's, in server mode) over HTTP on a free port: its URL."""
    from moto.server import ThreadedMotoServer  # a dev dependency, for the archive's tests only

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
