"""An FCM HTTP v1 stand-in that keeps its own record of every request.

It answers ``POST /v1/projects/{project}/messages:send`` as FCM does, including FCM's JSON error
bodies, and fails tokens on purpose so every error path can be exercised:

=====================  ==========================================================
token starts with      answer
=====================  ==========================================================
``unregistered-``      404 ``UNREGISTERED``
``invalid-``           400 ``INVALID_ARGUMENT``
``quota-``             429 ``QUOTA_EXCEEDED`` with ``Retry-After: 1``
``unavailable-``       503 ``UNAVAILABLE``
``flaky-``             503 ``UNAVAILABLE`` the first time, accepted afterwards
=====================  ==========================================================

``/_emulator/*`` endpoints let a test slow it down, push back on every request for a while,
read what it received (with its own timestamps) and reset it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

MAX_PAYLOAD_BYTES = 4096
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"

ERRORS: dict[str, tuple[int, str, str]] = {
    "UNREGISTERED": (404, "NOT_FOUND", "Requested entity was not found."),
    "INVALID_ARGUMENT": (400, "INVALID_ARGUMENT",
                         "The registration token is not a valid FCM registration token"),
    "QUOTA_EXCEEDED": (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Send requests'"),
    "UNAVAILABLE": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "INTERNAL": (500, "INTERNAL", "Internal error encountered."),
}
TOKEN_PREFIXES = {
    "unregistered-": "UNREGISTERED",
    "invalid-": "INVALID_ARGUMENT",
    "quota-": "QUOTA_EXCEEDED",
    "unavailable-": "UNAVAILABLE",
}


@dataclass
class Behaviour:
    """Runtime knobs, changed through ``POST /_emulator/config``."""

    latency_ms: float = 0.0
    push_back_error: str | None = None
    push_back_until: float = 0.0
    retry_after_s: float = 1.0


@dataclass
class Record:
    received_at: list[float] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    seen_flaky: set[str] = field(default_factory=set)

    def add(self, received_at: float, token: str, error: str | None) -> None:
        self.received_at.append(received_at)
        self.tokens.append(token)
        self.errors.append(error)


def error_response(code: str, message: str | None = None,
                   retry_after_s: float | None = None) -> web.Response:
    status, grpc_status, default_message = ERRORS[code]
    body = {"error": {"code": status, "message": message or default_message, "status": grpc_status,
                      "details": [{"@type": FCM_ERROR_TYPE, "errorCode": code}]}}
    headers = {"Retry-After": f"{retry_after_s:g}"} if retry_after_s is not None else None
    return web.Response(status=status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")


class Emulator:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.record = Record()
        self._message_ids = 0

    async def send(self, request: web.Request) -> web.Response:
        received_at = time.time()
        try:
            message = orjson.loads(await request.read())["message"]
            token = message["token"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return error_response("INVALID_ARGUMENT", "Request contains an invalid argument.")
        if self.behaviour.latency_ms:
            await asyncio.sleep(self.behaviour.latency_ms / 1000)
        error = self._error_for(token, message, received_at)
        self.record.add(received_at, token, error)
        if error is not None:
            retry_after = self.behaviour.retry_after_s if error == "QUOTA_EXCEEDED" else None
            return error_response(error, retry_after_s=retry_after)
        self._message_ids += 1
        project = request.match_info["project"]
        name = b'{"name":"projects/%s/messages/%d"}' % (project.encode(), self._message_ids)
        return web.Response(body=name, content_type="application/json")

    def _error_for(self, token: str, message: dict[str, Any], now: float) -> str | None:
        if self.behaviour.push_back_error and now < self.behaviour.push_back_until:
            return self.behaviour.push_back_error
        for prefix, error in TOKEN_PREFIXES.items():
            if token.startswith(prefix):
                return error
        if token.startswith("flaky-") and token not in self.record.seen_flaky:
            self.record.seen_flaky.add(token)
            return "UNAVAILABLE"
        if not _valid_payload(message):
            return "INVALID_ARGUMENT"
        return None

    async def configure(self, request: web.Request) -> web.Response:
        """``{"latency_ms"?, "push_back": {"error", "for_s", "retry_after_s"?} | null}``."""
        config = orjson.loads(await request.read())
        if "latency_ms" in config:
            self.behaviour.latency_ms = float(config["latency_ms"])
        if "push_back" in config:
            self._set_push_back(config["push_back"])
        return web.json_response(self._behaviour_dict())

    def _set_push_back(self, push_back: dict[str, Any] | None) -> None:
        if not push_back:
            self.behaviour.push_back_error = None
            return
        if push_back["error"] not in ERRORS:
            raise web.HTTPBadRequest(text=f"unknown error {push_back['error']}")
        self.behaviour.push_back_error = push_back["error"]
        self.behaviour.push_back_until = time.time() + float(push_back["for_s"])
        self.behaviour.retry_after_s = float(push_back.get("retry_after_s", 1.0))

    def _behaviour_dict(self) -> dict[str, Any]:
        return {"latency_ms": self.behaviour.latency_ms,
                "push_back_error": self.behaviour.push_back_error,
                "push_back_until": self.behaviour.push_back_until}

    async def requests(self, _: web.Request) -> web.StreamResponse:
        """Every request received, in order, as NDJSON: received_at (epoch s), token, error."""
        record = self.record
        rows = zip(record.received_at, record.tokens, record.errors, strict=True)
        lines = [orjson.dumps({"received_at": at, "token": token, "error": error})
                 for at, token, error in rows]
        return web.Response(body=b"\n".join(lines) + (b"\n" if lines else b""),
                            content_type="application/x-ndjson")

    async def stats(self, _: web.Request) -> web.Response:
        by_error: dict[str, int] = {}
        for error in self.record.errors:
            by_error[error or "OK"] = by_error.get(error or "OK", 0) + 1
        return web.json_response({"requests": len(self.record.tokens), "by_error": by_error,
                                  **self._behaviour_dict()})

    async def reset(self, _: web.Request) -> web.Response:
        self.behaviour = Behaviour()
        self.record = Record()
        return web.json_response({"reset": True})

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


def _valid_payload(message: dict[str, Any]) -> bool:
    data = message.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return False
    shared = {k: v for k, v in message.items() if k in ("notification", "data")}
    return len(orjson.dumps(shared)) <= MAX_PAYLOAD_BYTES


def make_app() -> web.Application:
    emulator = Emulator()
    app = web.Application(client_max_size=64 * 1024)
    app.router.add_post("/v1/projects/{project}/messages:send", emulator.send)
    app.router.add_post("/_emulator/config", emulator.configure)
    app.router.add_get("/_emulator/requests", emulator.requests)
    app.router.add_get("/_emulator/stats", emulator.stats)
    app.router.add_post("/_emulator/reset", emulator.reset)
    app.router.add_get("/healthz", emulator.healthz)
    return app
