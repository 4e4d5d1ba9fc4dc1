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

A message is refused with ``INVALID_ARGUMENT`` when FCM would refuse it: data values that are not
strings, notification plus data over 4096 bytes, an ``apns-collapse-id`` header over 64 bytes
(FCM's own message), a replacement field that is not a string, or a web push ``Topic`` outside
RFC 8030 §5.4 (1 to 32 characters of the URL-safe base64 alphabet; the RFC makes a push service
answer 400, the emulator refuses it up front).

``/_emulator/*`` endpoints let a test slow it down, push back on every request for a while,
read what it received (with its own timestamps, and the replacement fields each message carried:
Android ``notification.tag`` and ``collapse_key``, APNs ``apns-collapse-id``, web push ``Topic``
and ``notification.tag``) and reset it.
"""

from __future__ import annotations

import asyncio
import re
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


REPLACEMENT_FIELDS = (
    ("android_tag", "android.notification.tag"),
    ("android_collapse_key", "android.collapse_key"),
    ("apns_collapse_id", "apns.headers.apns-collapse-id"),
    ("webpush_topic", "webpush.headers.Topic"),
    ("webpush_tag", "webpush.notification.tag"),
)
"""(name in the record, path in the FCM message), in the order of :func:`_replacement`."""
REPLACEMENT_NAMES = tuple(name for name, _ in REPLACEMENT_FIELDS)

MAX_APNS_COLLAPSE_ID_BYTES = 64
WEB_PUSH_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
_STRING_OR_NONE = frozenset({str, type(None)})

Replacement = tuple[Any, ...]
"""The values of :data:`REPLACEMENT_FIELDS`, in order (None where the message had none)."""
NO_REPLACEMENT: Replacement = (None,) * len(REPLACEMENT_FIELDS)


@dataclass
class Record:
    """Every request in arrival order: (received_at, token, error, replacement)."""

    rows: list[tuple[float, str, str | None, Replacement]] = field(default_factory=list)
    seen_flaky: set[str] = field(default_factory=set)

    def add(self, received_at: float, token: str, error: str | None,
            replacement: Replacement) -> None:
        self.rows.append((received_at, token, error, replacement))


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
        raw = await request.read()
        try:
            message = orjson.loads(raw)["message"]
            token = message["token"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return error_response("INVALID_ARGUMENT", "Request contains an invalid argument.")
        if self.behaviour.latency_ms:
            await asyncio.sleep(self.behaviour.latency_ms / 1000)
        replacement = _replacement(message)
        error, reason = self._error_for(token, message, replacement, len(raw), received_at)
        self.record.add(received_at, token, error, replacement)
        if error is not None:
            retry_after = self.behaviour.retry_after_s if error == "QUOTA_EXCEEDED" else None
            return error_response(error, reason, retry_after_s=retry_after)
        self._message_ids += 1
        project = request.match_info["project"]
        name = b'{"name":"projects/%s/messages/%d"}' % (project.encode(), self._message_ids)
        return web.Response(body=name, content_type="application/json")

    def _error_for(self, token: str, message: dict[str, Any], replacement: Replacement,
                   size: int, now: float) -> tuple[str | None, str | None]:
        """(FCM error code, message) of the answer; (None, None) to accept."""
        if self.behaviour.push_back_error and now < self.behaviour.push_back_until:
            return self.behaviour.push_back_error, None
        for prefix, error in TOKEN_PREFIXES.items():
            if token.startswith(prefix):
                return error, None
        if token.startswith("flaky-") and token not in self.record.seen_flaky:
            self.record.seen_flaky.add(token)
            return "UNAVAILABLE", None
        reason = _invalid_payload(message, size) or _invalid_replacement(replacement)
        return ("INVALID_ARGUMENT", reason) if reason else (None, None)

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
        """Every request received, in order, as NDJSON: received_at (epoch s), token, error, and
        the replacement fields the message carried (null where it had none)."""
        lines = [orjson.dumps({"received_at": at, "token": token, "error": error,
                               **dict(zip(REPLACEMENT_NAMES, replacement, strict=True))})
                 for at, token, error, replacement in self.record.rows]
        return web.Response(body=b"\n".join(lines) + (b"\n" if lines else b""),
                            content_type="application/x-ndjson")

    async def stats(self, _: web.Request) -> web.Response:
        by_error: dict[str, int] = {}
        for _at, _token, error, _replacement in self.record.rows:
            by_error[error or "OK"] = by_error.get(error or "OK", 0) + 1
        return web.json_response({"requests": len(self.record.rows), "by_error": by_error,
                                  **self._behaviour_dict()})

    async def reset(self, _: web.Request) -> web.Response:
        self.behaviour = Behaviour()
        self.record = Record()
        return web.json_response({"reset": True})

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


def _replacement(message: dict[str, Any]) -> Replacement:
    # Spelt out rather than walked from REPLACEMENT_FIELDS: this runs on every request of a bench.
    android, apns, webpush = message.get("android"), message.get("apns"), message.get("webpush")
    if android is None and apns is None and webpush is None:
        return NO_REPLACEMENT
    return (_at(android, "notification", "tag"), _at(android, "collapse_key"),
            _at(apns, "headers", "apns-collapse-id"), _at(webpush, "headers", "Topic"),
            _at(webpush, "notification", "tag"))


def _at(value: Any, key: str, inner: str | None = None) -> Any:
    """``value[key]`` (or ``value[key][inner]``), None where a level is missing or no object."""
    if not isinstance(value, dict):
        return None
    value = value.get(key)
    if inner is None:
        return value
    return value.get(inner) if isinstance(value, dict) else None


def _invalid_payload(message: dict[str, Any], size: int) -> str | None:
    data = message.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return "Invalid value at 'message.data' (TYPE_STRING)"
    # Strings re-encoded compactly take at most the bytes the request spent on them.
    if size <= MAX_PAYLOAD_BYTES:
        return None
    shared = {k: v for k, v in message.items() if k in ("notification", "data")}
    return "Message is too big" if len(orjson.dumps(shared)) > MAX_PAYLOAD_BYTES else None


def _invalid_replacement(replacement: Replacement) -> str | None:
    if replacement is NO_REPLACEMENT:
        return None
    if not _STRING_OR_NONE.issuperset(map(type, replacement)):
        return _not_a_string(replacement)
    _, _, collapse_id, topic, _ = replacement
    if collapse_id is not None and len(collapse_id.encode()) > MAX_APNS_COLLAPSE_ID_BYTES:
        return "The length of [apns-collapse-id] header must not exceed [64] bytes."
    if topic is not None and not WEB_PUSH_TOPIC.fullmatch(topic):
        return ("The Topic header must be 1 to 32 characters of the URL and filename safe "
                "base64 alphabet (RFC 8030 section 5.4).")
    return None



def _not_a_string(replacement: Replacement) -> str:
    path = next(path for (_, path), value in zip(REPLACEMENT_FIELDS, replacement, strict=True)
                if not isinstance(value, str | None))
    return f"Invalid value at 'message.{path}' (TYPE_STRING)"


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
