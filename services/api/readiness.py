"""``/readyz``: whether MongoDB, RabbitMQ and Redis all answer, each within a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

READY_CHECK_TIMEOUT_S = 2.0

Probe = Callable[[], Awaitable[Any]]


class Readiness:
    def __init__(self, probes: dict[str, Probe]) -> None:
        self._probes = probes

    async def check(self) -> dict[str, str]:
        """``{"mongodb": "ok", "rabbitmq": "error: ...", ...}``."""
        results = await asyncio.gather(*(_check(probe) for probe in self._probes.values()))
        return dict(zip(self._probes, results, strict=True))


async def _check(probe: Probe) -> str:
    try:
        answer = await asyncio.wait_for(probe(), READY_CHECK_TIMEOUT_S)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok" if answer is not False else "error: no answer"
