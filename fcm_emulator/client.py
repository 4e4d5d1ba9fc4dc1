"""A small client for the emulator's ``/_emulator`` endpoints, for tests, the demo and benches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson


@dataclass(frozen=True)
class Received:
    received_at: float
    token: str
    error: str | None

    @property
    def accepted(self) -> bool:
        return self.error is None


class EmulatorClient:
    def __init__(self, base_url: str) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=30.0)

    def configure(self, **config: Any) -> dict[str, Any]:
        response = self._http.post("/_emulator/config", json=config)
        response.raise_for_status()
        return dict(response.json())

    def received(self) -> list[Received]:
        response = self._http.get("/_emulator/requests")
        response.raise_for_status()
        return [Received(**orjson.loads(line)) for line in response.content.splitlines() if line]

    def stats(self) -> dict[str, Any]:
        response = self._http.get("/_emulator/stats")
        response.raise_for_status()
        return dict(response.json())

    def reset(self) -> None:
        self._http.post("/_emulator/reset").raise_for_status()

    def close(self) -> None:
        self._http.close()
