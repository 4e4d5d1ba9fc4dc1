"""A small client for the emulator's ``/_emulator`` endpoints, for tests, the demo and benches."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import httpx
import orjson


@dataclass(frozen=True)
class Received:
    """One request the emulator received: its token, its answer, the replacement fields the
    message carried (None where it carried none), what was wrong with its body, who sent it.

    ``error`` is the FcmError ``errorCode`` of the answer, or its ``google.rpc`` status where it
    carried none (``UNAUTHENTICATED``, ``PERMISSION_DENIED``, ``NOT_FOUND``, and
    ``INVALID_ARGUMENT`` for a payload problem, whose text is in ``violation``).
    """

    received_at: float
    token: str
    error: str | None
    android_tag: str | None = None
    android_collapse_key: str | None = None
    apns_collapse_id: str | None = None
    webpush_topic: str | None = None
    webpush_tag: str | None = None
    violation: str | None = None
    """What Google's schema or FCM's rules refuse in the body, whatever the answer was."""
    authorized_as: str | None = None
    """The service account (client_email) whose access token the request carried (OAuth on)."""
    auth_error: str | None = None
    """Why it was refused as unauthenticated: missing, unknown, expired or revoked."""
    validate_only: bool = False
    body: Any = None
    """The request body, only from an emulator started with ``--keep-bodies``."""

    @property
    def reached_fcm(self) -> bool:
        """Answered by FCM itself, not refused for its OAuth token (a sender whose token the
        emulator forgot, at a reset, meets one 401 and sends again with a new one)."""
        return self.auth_error is None

    @property
    def accepted(self) -> bool:
        return self.error is None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Received:
        """A row of ``/_emulator/requests``; fields this client does not know are left out."""
        return cls(**{name: row[name] for name in _RECEIVED_FIELDS if name in row})


_RECEIVED_FIELDS = tuple(f.name for f in fields(Received))


@dataclass(frozen=True)
class GrantRow:
    """One request to the emulator's OAuth token endpoint."""

    at: float
    client_email: str | None
    granted: bool
    error: str | None
    expires_at: float | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> GrantRow:
        """A row of ``/_emulator/grants``; fields this client does not know are left out."""
        return cls(**{name: row[name] for name in _GRANT_FIELDS if name in row})


_GRANT_FIELDS = ("at", "client_email", "granted", "error", "expires_at")


class EmulatorClient:
    def __init__(self, base_url: str) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=30.0)
        self._record = ""
        self._received: list[Received] = []
        """The rows of the emulator's record ``_record`` read so far (a test polls the record
        while campaigns of tens of thousands run: each poll reads the new rows only)."""

    def configure(self, **config: Any) -> dict[str, Any]:
        response = self._http.post("/_emulator/config", json=config)
        response.raise_for_status()
        return dict(response.json())

    def received(self) -> list[Received]:
        """Every request of the emulator's record, in arrival order (the record a reset by any
        client started)."""
        response = self._http.get("/_emulator/requests", params={
            "after": len(self._received), "record": self._record})
        response.raise_for_status()
        if response.headers["X-Emulator-After"] == "0":
            self._received = []
        self._record = response.headers["X-Emulator-Record"]
        self._received.extend(Received.from_row(orjson.loads(line))
                              for line in response.content.splitlines() if line)
        return list(self._received)

    def grants(self) -> list[GrantRow]:
        response = self._http.get("/_emulator/grants")
        response.raise_for_status()
        return [GrantRow.from_row(orjson.loads(line))
                for line in response.content.splitlines() if line]

    def stats(self) -> dict[str, Any]:
        response = self._http.get("/_emulator/stats")
        response.raise_for_status()
        return dict(response.json())

    def reset(self) -> None:
        self._http.post("/_emulator/reset").raise_for_status()

    def close(self) -> None:
        self._http.close()
