"""An FCM HTTP v1 stand-in whose oracle is Google's, not Herald's, and that keeps its own record.

It answers ``POST /v1/projects/{project}/messages:send`` as FCM does. Every body is checked against
Google's FCM v1 discovery document (:mod:`fcm_emulator.discovery`, loaded from
``google-api-python-client`` at start) and FCM's documented rules; a problem is answered as Google
answers it: 400 ``INVALID_ARGUMENT`` with a ``google.rpc.BadRequest`` detail naming the field and
no FcmError (that detail is about the token only). On top of the document, the emulator refuses
what FCM refuses beyond it: notification plus data over 4096 bytes ("Message is too big"), an
``apns-collapse-id`` header over 64 bytes (FCM's own message), a web push ``Topic`` outside
RFC 8030 §5.4 (1 to 32 characters of the URL-safe base64 alphabet), a ``webpush.notification.tag``
that is not a string.

The answer is decided in this order (Google checks credentials before it reads a body):

1. OAuth (on when started with ``--service-account``): no valid access token of this emulator's
   ``/token`` → 401 ``UNAUTHENTICATED``, no FcmError; the row's ``auth_error`` says why.
2. ``fail_all``, then ``push_back`` (whole-emulator faults, ``POST /_emulator/config``).
3. The body: a schema or FCM-rule violation → 400 with a ``BadRequest`` detail.
4. The token (or ``fid``), by prefix:

=====================  ==========================================================================
token starts with      answer (``google.rpc`` status; FcmError ``errorCode``)
=====================  ==========================================================================
``unregistered-``      404 ``NOT_FOUND`` "Requested entity was not found."; ``UNREGISTERED``
``invalid-``           400 ``INVALID_ARGUMENT`` "The registration token is not a valid FCM
                       registration token"; ``INVALID_ARGUMENT``
``mismatch-``          403 ``PERMISSION_DENIED`` "SenderId mismatch"; ``SENDER_ID_MISMATCH``
``apnsauth-``          401 ``UNAUTHENTICATED`` "Auth error from APNS or Web Push Service";
                       ``THIRD_PARTY_AUTH_ERROR``, plus an ``ApnsError`` detail (403,
                       ``InvalidProviderToken``)
``quota-``             429 ``RESOURCE_EXHAUSTED``; ``QUOTA_EXCEEDED``, ``Retry-After: 1``, a
                       ``QuotaFailure`` naming the project's message rate
``devicequota-``       429 ``RESOURCE_EXHAUSTED`` the first time, accepted afterwards (FCM's
                       per-device rate): ``QUOTA_EXCEEDED``, ``Retry-After: 1``, a
                       ``QuotaFailure`` naming the device's message rate (recorded
                       ``QUOTA_EXCEEDED``, FCM's errorCode)
``unavailable-``       503 ``UNAVAILABLE``; ``UNAVAILABLE``
``internal-``          500 ``INTERNAL``; ``INTERNAL``
``unspecified-``       500 ``UNKNOWN`` "Unknown error."; ``UNSPECIFIED_ERROR`` (Google's "no more
                       information is available about this error"): a recipient's failure that
                       says nothing about its token
``flaky-``             503 ``UNAVAILABLE`` the first time, accepted afterwards
``stall-``             accepted and recorded at arrival, the 200 held back ``stall_ms`` (an answer
                       lost in the network after delivery)
=====================  ==========================================================================

A body with ``validateOnly: true`` is checked and answered as FCM answers a dry run
(``projects/<p>/messages/fake_message_id``); its row says ``validate_only``.

``POST /_emulator/config`` (JSON, every key optional; the answer is the whole configuration):

=====================================================  =============================================
key                                                    effect
=====================================================  =============================================
``latency_ms``                                         every send waits that long before its answer
``push_back: {"error", "for_s", "retry_after_s"?}``    every send answered with a token-level fault
                                                       (``UNREGISTERED``, ``INVALID_ARGUMENT``,
                                                       ``SENDER_ID_MISMATCH``,
                                                       ``THIRD_PARTY_AUTH_ERROR``,
                                                       ``QUOTA_EXCEEDED``, ``UNAVAILABLE``,
                                                       ``INTERNAL``) for ``for_s``; null ends it
``fail_all: {"error", "for_s"?}``                      every send answered with a project-level
                                                       fault until ``for_s`` elapses (forever
                                                       without it) or null: ``INVALID_PAYLOAD``
                                                       (400, ``BadRequest`` "Message is too big"),
                                                       ``PERMISSION_DENIED`` (403, IAM ``ErrorInfo``),
                                                       ``UNAUTHENTICATED`` (401, bad OAuth token),
                                                       ``THIRD_PARTY_AUTH_ERROR``,
                                                       ``SENDER_ID_MISMATCH``, ``NOT_FOUND`` (404,
                                                       unknown project); recorded, not delivered
``revoke_tokens: true``                                every access token issued so far → 401
``token_endpoint: {"refuse", "stall_s", ...}``         ``refuse: "invalid_grant"`` refuses every
                                                       grant, ``stall_s`` holds each grant's answer,
                                                       ``expires_in_s`` the lifetime of new tokens
                                                       (defaults null, 0, 3600; each optional)
``stall_ms``                                           the hold of ``stall-`` tokens (15000)
``keep_bodies``                                        true: keep each request's body from now on
                                                       (listed as ``body``), until a reset
``payload_fcm_error``                                  (addition) true: FCM-rule violations also
                                                       carry ``FcmError INVALID_ARGUMENT``, as some
                                                       public reports show FCM answering
=====================================================  =============================================

``POST /_emulator/reset`` forgets the record, the configuration and the grants (the service
accounts and the tokens issued stay valid: ``revoke_tokens`` revokes). ``POST /token`` is the
OAuth token endpoint (:mod:`fcm_emulator.oauth`). What was received, each as NDJSON in arrival order:

- ``GET /_emulator/requests``, one row per send (``?after=N&record=ID``: only the rows after the
  first N of the record that ``X-Emulator-Record`` named, so a poller reads what is new):
  ``received_at`` (epoch s, at arrival), ``token``
  (or FID; empty for a topic, a condition or an unreadable body), ``error`` (the answer's FcmError
  ``errorCode``, else its ``google.rpc`` status: ``UNAUTHENTICATED``, ``PERMISSION_DENIED``,
  ``NOT_FOUND``, ``INVALID_ARGUMENT`` for a payload problem; null when accepted), ``violation``
  (what is wrong with the body itself, whatever the answer was), ``authorized_as`` (the service
  account of the access token), ``auth_error`` (``missing``, ``unknown``, ``expired``,
  ``revoked``), ``validate_only``, the replacement fields (Android ``notification.tag`` and
  ``collapse_key``, APNs ``apns-collapse-id``, web push ``Topic`` and ``notification.tag``), and
  ``body`` when started with ``--keep-bodies`` (or configured with ``keep_bodies``);
- ``GET /_emulator/grants``, one row per grant request: ``at``, ``client_email``, ``granted``,
  ``error``, ``expires_at``.

``GET /_emulator/stats`` counts them (``requests``, ``by_error``, ``violations``; and
``violations_ever`` with the first ``violation_samples``, which a reset keeps; ``grants`` by
client_email, ``grants_refused``, ``unauthenticated`` by reason), names the discovery document's
``discovery_revision``, says whether ``oauth`` is on, and repeats the configuration.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from fcm_emulator.discovery import Validator, Violation
from fcm_emulator.faults import (
    FAIL_ALL_FAULTS,
    INVALID_PAYLOAD,
    TOKEN_FAULTS,
    TOO_BIG,
    fault_response,
    recorded_as,
    violation_response,
)
from fcm_emulator.oauth import Authority, Grant, GrantRefused

MAX_PAYLOAD_BYTES = 4096
MAX_APNS_COLLAPSE_ID_BYTES = 64
WEB_PUSH_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
_STRING_OR_NONE = frozenset({str, type(None)})

TOKEN_PREFIXES = {
    "unregistered-": "UNREGISTERED",
    "invalid-": "INVALID_ARGUMENT",
    "mismatch-": "SENDER_ID_MISMATCH",
    "apnsauth-": "THIRD_PARTY_AUTH_ERROR",
    "quota-": "QUOTA_EXCEEDED",
    "unavailable-": "UNAVAILABLE",
    "internal-": "INTERNAL",
    "unspecified-": "UNSPECIFIED_ERROR",
}
ONCE_PREFIXES = {"flaky-": "UNAVAILABLE", "devicequota-": "DEVICE_QUOTA_EXCEEDED"}
"""Tokens refused the first time they are sent to, accepted afterwards."""
QUOTA_FAULTS = frozenset({"QUOTA_EXCEEDED", "DEVICE_QUOTA_EXCEEDED"})
"""Answered with ``Retry-After``."""
REFUSABLE_GRANTS = ("invalid_grant",)
REFUSED_GRANT = "Invalid grant: account not found"  # Google's, for a deleted service account

REPLACEMENT_FIELDS = (
    ("android_tag", "android.notification.tag"),
    ("android_collapse_key", "android.collapse_key"),
    ("apns_collapse_id", "apns.headers.apns-collapse-id"),
    ("webpush_topic", "webpush.headers.Topic"),
    ("webpush_tag", "webpush.notification.tag"),
)
"""(name in the record, path in the FCM message), in the order of :func:`_replacement`."""
REPLACEMENT_NAMES = tuple(name for name, _ in REPLACEMENT_FIELDS)

Replacement = tuple[Any, ...]
"""The values of :data:`REPLACEMENT_FIELDS`, in order (None where the message had none)."""
NO_REPLACEMENT: Replacement = (None,) * len(REPLACEMENT_FIELDS)

ROW_NAMES = ("received_at", "token", "error", "violation", "authorized_as", "auth_error",
             "validate_only", *REPLACEMENT_NAMES)
"""The fields of a ``/_emulator/requests`` row, in the order :class:`Record` keeps them."""

HERALD_BODY = re.compile(rb'\{"message":\{"token":"([^"\\\x00-\x1f]*)"')
"""The head of a body that names its token first (Herald's ``MessageTemplate``): what follows the
token decides the verdict alone, so identical bodies are checked once (:meth:`Emulator._examine`)."""
MAX_CACHED_VERDICTS = 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the body says, whoever it is sent to: its problem, replacement fields, dry run."""

    violation: Violation | None
    replacement: Replacement
    validate_only: bool


UNREADABLE = Verdict(Violation("", "Invalid JSON payload received. Unexpected token."),
                     NO_REPLACEMENT, False)


@dataclass
class Behaviour:
    """Runtime knobs, changed through ``POST /_emulator/config``."""

    latency_ms: float = 0.0
    push_back_error: str | None = None
    push_back_until: float = 0.0
    retry_after_s: float = 1.0
    fail_all_error: str | None = None
    fail_all_until: float = math.inf
    stall_ms: float = 15000.0
    refuse_grants: str | None = None
    grant_stall_s: float = 0.0
    expires_in_s: int = 3600
    payload_fcm_error: bool = False
    keep_bodies: bool = False
    """Keep each request's body from now on (as ``--keep-bodies`` does from the start)."""

    def to_dict(self) -> dict[str, Any]:
        fail_all = None if self.fail_all_error is None else {
            "error": self.fail_all_error,
            "until": None if math.isinf(self.fail_all_until) else self.fail_all_until}
        return {"latency_ms": self.latency_ms, "push_back_error": self.push_back_error,
                "push_back_until": self.push_back_until, "fail_all": fail_all,
                "stall_ms": self.stall_ms, "payload_fcm_error": self.payload_fcm_error,
                "keep_bodies": self.keep_bodies,
                "token_endpoint": {"refuse": self.refuse_grants, "stall_s": self.grant_stall_s,
                                   "expires_in_s": self.expires_in_s}}


PLAIN_KNOBS: dict[str, Callable[[Any], Any]] = {
    "latency_ms": float, "stall_ms": float, "payload_fcm_error": bool, "keep_bodies": bool}
"""Configuration keys that set the :class:`Behaviour` field of their name, converted."""


@dataclass
class Record:
    """Every send in arrival order, as tuples of :data:`ROW_NAMES` (cheap to keep and to list
    for campaigns of 50,000); the raw bodies beside them when they are kept."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    bodies: list[bytes | None] = field(default_factory=list)
    """Beside each row: its raw body, or None where bodies were not kept."""
    seen_flaky: set[str] = field(default_factory=set)
    """Tokens of ``ONCE_PREFIXES`` refused once already."""
    lines: list[bytes] = field(default_factory=list)
    """``rows[:len(lines)]`` encoded once (rows never change): a test that polls the record while
    a campaign of 50,000 runs pays for the new rows only."""
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    """Names this record (a reset starts another): a reader that kept rows of it asks only for
    the rows after them (``?after=N&record=ID``)."""

    def encoded(self) -> list[bytes]:
        """One NDJSON line (newline included) per row, ``body`` included when kept."""
        start = len(self.lines)
        for index in range(start, len(self.rows)):
            row = dict(zip(ROW_NAMES, self.rows[index], strict=True))
            raw = self.bodies[index]
            if raw is not None:
                row["body"] = _body(raw)
            self.lines.append(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
        return self.lines


class Emulator:
    def __init__(self, authority: Authority, validator: Validator, *,
                 keep_bodies: bool = False) -> None:
        self.authority = authority
        self.validator = validator
        self.keep_bodies = keep_bodies
        self.behaviour = Behaviour()
        self.record = Record()
        self._verdicts: dict[bytes, Verdict] = {}
        self._message_ids = 0
        self.violations_ever = 0
        """Bodies that broke Google's description since the emulator started (a reset keeps
        this): what a test suite checks before it stops the emulator."""
        self.violation_samples: list[str] = []

    # --- messages:send -------------------------------------------------------------------------------
    async def send(self, request: web.Request) -> web.Response:
        received_at = time.time()
        raw = await request.read()
        authorized_as, auth_error = self._authorize(request, received_at)
        if self.behaviour.latency_ms:
            await asyncio.sleep(self.behaviour.latency_ms / 1000)
        token, verdict = self._examine(raw)
        project = request.match_info["project"]
        error, refusal = self._refusal(project, token, verdict, auth_error, received_at)
        self.record.rows.append((
            received_at, token, error, verdict.violation and verdict.violation.description,
            authorized_as, auth_error, verdict.validate_only, *verdict.replacement))
        self.record.bodies.append(raw if self.keep_bodies or self.behaviour.keep_bodies
                                  else None)
        if verdict.violation is not None:
            self._count_violation(verdict.violation.field, verdict.violation.description)
        if refusal is not None:
            return refusal
        if token.startswith("stall-"):
            await asyncio.sleep(self.behaviour.stall_ms / 1000)
        return self._accepted(project, verdict.validate_only)

    def _authorize(self, request: web.Request, now: float) -> tuple[str | None, str | None]:
        if not self.authority.enabled:
            return None, None
        return self.authority.authorize(request.headers.get("Authorization"), now)

    def _examine(self, raw: bytes) -> tuple[str, Verdict]:
        """(token, verdict): from the cache when the same body went to another token before."""
        head = HERALD_BODY.match(raw)
        if head is not None:
            verdict = self._verdicts.get(raw[head.end():])
            if verdict is not None:
                try:
                    return head.group(1).decode(), verdict
                except UnicodeDecodeError:
                    pass
        token, verdict = self._judge(raw)
        if head is not None and token.encode() == head.group(1):  # no second "token" later on
            if len(self._verdicts) >= MAX_CACHED_VERDICTS:
                self._verdicts.clear()
            self._verdicts[raw[head.end():]] = verdict
        return token, verdict

    def _judge(self, raw: bytes) -> tuple[str, Verdict]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "", UNREADABLE
        violation = self.validator.check(body)
        message = body.get("message") if isinstance(body, dict) else None
        if not isinstance(message, dict):
            return "", Verdict(violation, NO_REPLACEMENT, False)
        replacement = _replacement(message)
        if violation is None:
            violation = _beyond_the_document(message, len(raw), replacement)
        validate_only = body.get("validateOnly", body.get("validate_only")) is True
        return _target_id(message), Verdict(violation, replacement, validate_only)

    def _refusal(self, project: str, token: str, verdict: Verdict, auth_error: str | None,
                 now: float) -> tuple[str | None, web.Response | None]:
        """(error in the record, answer) of a refused send; (None, None) to accept it."""
        if auth_error is not None:
            return "UNAUTHENTICATED", fault_response("UNAUTHENTICATED", project)
        behaviour = self.behaviour
        if behaviour.fail_all_error is not None and now < behaviour.fail_all_until:
            return self._fail_all(project, behaviour.fail_all_error)
        if behaviour.push_back_error is not None and now < behaviour.push_back_until:
            return behaviour.push_back_error, self._fault(project, behaviour.push_back_error)
        if verdict.violation is not None:
            return "INVALID_ARGUMENT", violation_response(
                verdict.violation, with_fcm_error=behaviour.payload_fcm_error)
        error = self._token_fault(token)
        return (recorded_as(error), self._fault(project, error)) if error else (None, None)

    def _fail_all(self, project: str, error: str) -> tuple[str, web.Response]:
        if error == INVALID_PAYLOAD:
            return "INVALID_ARGUMENT", violation_response(TOO_BIG)
        return error, self._fault(project, error)

    def _fault(self, project: str, error: str) -> web.Response:
        retry_after = self.behaviour.retry_after_s if error in QUOTA_FAULTS else None
        return fault_response(error, project, retry_after_s=retry_after)

    def _token_fault(self, token: str) -> str | None:
        for prefix, error in TOKEN_PREFIXES.items():
            if token.startswith(prefix):
                return error
        for prefix, error in ONCE_PREFIXES.items():
            if token.startswith(prefix) and token not in self.record.seen_flaky:
                self.record.seen_flaky.add(token)
                return error
        return None

    def _accepted(self, project: str, validate_only: bool) -> web.Response:
        if validate_only:
            return web.json_response({"name": f"projects/{project}/messages/fake_message_id"})
        self._message_ids += 1
        name = b'{"name":"projects/%s/messages/%d"}' % (project.encode(), self._message_ids)
        return web.Response(body=name, content_type="application/json")

    # --- OAuth token endpoint ------------------------------------------------------------------------
    async def token(self, request: web.Request) -> web.Response:
        """Google's ``token_uri``: the JWT-bearer grant of a configured service account."""
        arrived_at = time.time()
        form = await request.post()
        if self.behaviour.grant_stall_s:
            await asyncio.sleep(self.behaviour.grant_stall_s)
        now = time.time()
        try:
            account = self.authority.verify(_form_str(form, "grant_type"),
                                            _form_str(form, "assertion"), now)
            if self.behaviour.refuse_grants is not None:
                raise GrantRefused(REFUSED_GRANT, self.behaviour.refuse_grants,
                                   account.client_email)
        except GrantRefused as refused:
            self.authority.grants.append(Grant(arrived_at, refused.client_email, False,
                                               refused.description, None))
            return web.json_response(refused.body(), status=400)
        expires_in_s = self.behaviour.expires_in_s
        access_token = self.authority.issue(account, expires_in_s, now)
        self.authority.grants.append(Grant(arrived_at, account.client_email, True, None,
                                           now + expires_in_s))
        return web.json_response({"access_token": access_token, "expires_in": expires_in_s,
                                  "token_type": "Bearer"})

    # --- /_emulator ----------------------------------------------------------------------------------
    async def configure(self, request: web.Request) -> web.Response:
        """Every key optional; see the module's table. The answer is the whole configuration."""
        config = orjson.loads(await request.read())
        if not isinstance(config, dict):
            raise web.HTTPBadRequest(text="the configuration is a JSON object")
        try:
            revoked = self._apply(config)
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=f"bad configuration: {exc}") from None
        return web.json_response({**self.behaviour.to_dict(), "revoked_tokens": revoked})

    def _apply(self, config: dict[str, Any]) -> int:
        for name, kind in PLAIN_KNOBS.items():
            if name in config:
                setattr(self.behaviour, name, kind(config[name]))
        if "push_back" in config:
            self._set_push_back(config["push_back"])
        if "fail_all" in config:
            self._set_fail_all(config["fail_all"])
        if "token_endpoint" in config:
            self._set_token_endpoint(config["token_endpoint"] or {})
        if config.get("revoke_tokens"):
            self.authority.revoke_all()
        return sum(token.revoked for token in self.authority.tokens.values())

    def _set_push_back(self, push_back: dict[str, Any] | None) -> None:
        if not push_back:
            self.behaviour.push_back_error = None
            return
        if push_back["error"] not in TOKEN_FAULTS:
            raise ValueError(f"push_back.error {push_back['error']!r} is none of {TOKEN_FAULTS}")
        self.behaviour.push_back_error = push_back["error"]
        self.behaviour.push_back_until = time.time() + float(push_back["for_s"])
        self.behaviour.retry_after_s = float(push_back.get("retry_after_s", 1.0))

    def _set_fail_all(self, fail_all: dict[str, Any] | None) -> None:
        if not fail_all:
            self.behaviour.fail_all_error = None
            return
        if fail_all["error"] not in FAIL_ALL_FAULTS:
            raise ValueError(f"fail_all.error {fail_all['error']!r} is none of {FAIL_ALL_FAULTS}")
        for_s = fail_all.get("for_s")
        self.behaviour.fail_all_error = fail_all["error"]
        self.behaviour.fail_all_until = math.inf if for_s is None else time.time() + float(for_s)

    def _set_token_endpoint(self, settings: dict[str, Any]) -> None:
        behaviour = self.behaviour
        if "refuse" in settings:
            if settings["refuse"] not in (None, *REFUSABLE_GRANTS):
                raise ValueError(f"token_endpoint.refuse is null or one of {REFUSABLE_GRANTS}")
            behaviour.refuse_grants = settings["refuse"]
        if "stall_s" in settings:
            behaviour.grant_stall_s = float(settings["stall_s"])
        if "expires_in_s" in settings:
            behaviour.expires_in_s = int(settings["expires_in_s"])

    async def requests(self, request: web.Request) -> web.Response:
        """Every send, in order, as NDJSON rows of :data:`ROW_NAMES` (and ``body``, kept); with
        ``after=N&record=ID`` of the record named in the ``X-Emulator-Record`` header, only the
        rows after the first N (all of them if the record was reset since)."""
        lines, record = self.record.encoded(), self.record.id
        after = request.query.get("after", "0")
        start = int(after) if after.isdigit() and request.query.get("record") == record else 0
        return web.Response(body=b"".join(lines[min(start, len(lines)):]),
                            content_type="application/x-ndjson",
                            headers={"X-Emulator-Record": record, "X-Emulator-After": str(start)})

    async def grants(self, _: web.Request) -> web.Response:
        """Every request to ``/token``, in order, as NDJSON."""
        return _ndjson([orjson.dumps(grant.row()) for grant in self.authority.grants])

    def _count_violation(self, field: str, description: str) -> None:
        self.violations_ever += 1
        if len(self.violation_samples) < 20:
            self.violation_samples.append(f"{field}: {description}")

    async def stats(self, _: web.Request) -> web.Response:
        by_error: dict[str, int] = {}
        unauthenticated: dict[str, int] = {}
        violations = 0
        for row in self.record.rows:
            error, violation, auth_error = row[2], row[3], row[5]
            by_error[error or "OK"] = by_error.get(error or "OK", 0) + 1
            violations += violation is not None
            if auth_error is not None:
                unauthenticated[auth_error] = unauthenticated.get(auth_error, 0) + 1
        grants: dict[str, int] = {}
        for grant in self.authority.grants:
            if grant.granted and grant.client_email is not None:
                grants[grant.client_email] = grants.get(grant.client_email, 0) + 1
        return web.json_response({
            "requests": len(self.record.rows), "by_error": by_error, "violations": violations,
            "violations_ever": self.violations_ever, "violation_samples": self.violation_samples,
            "grants": grants, "grants_refused": sum(not g.granted for g in self.authority.grants),
            "unauthenticated": unauthenticated, "discovery_revision": self.validator.revision,
            "oauth": self.authority.enabled, **self.behaviour.to_dict()})

    async def reset(self, _: web.Request) -> web.Response:
        self.behaviour = Behaviour()
        self.record = Record()
        self.authority.forget()
        return web.json_response({"reset": True})

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


def _form_str(form: Any, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _ndjson(lines: list[bytes]) -> web.Response:
    return web.Response(body=b"\n".join(lines) + (b"\n" if lines else b""),
                        content_type="application/x-ndjson")


def _body(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")


def _target_id(message: dict[str, Any]) -> str:
    """The registration token (or FID) the message goes to; empty for a topic or condition."""
    for name in ("token", "fid"):
        value = message.get(name)
        if isinstance(value, str):
            return value
    return ""


def _replacement(message: dict[str, Any]) -> Replacement:
    # Spelt out rather than walked from REPLACEMENT_FIELDS: this runs on every request of a bench.
    android, apns, webpush = message.get("android"), message.get("apns"), message.get("webpush")
    if android is None and apns is None and webpush is None:
        return NO_REPLACEMENT
    collapse_key = _at(android, "collapse_key")
    return (_at(android, "notification", "tag"),
            _at(android, "collapseKey") if collapse_key is None else collapse_key,
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


def _beyond_the_document(message: dict[str, Any], size: int,
                         replacement: Replacement) -> Violation | None:
    """FCM's limits that the discovery document does not state, on a message that fits it."""
    return _too_big(message, size) or _invalid_replacement(replacement)


def _too_big(message: dict[str, Any], size: int) -> Violation | None:
    # Strings re-encoded compactly take at most the bytes the request spent on them.
    if size <= MAX_PAYLOAD_BYTES:
        return None
    shared = {k: v for k, v in message.items() if k in ("notification", "data")}
    return TOO_BIG if len(orjson.dumps(shared)) > MAX_PAYLOAD_BYTES else None


def _invalid_replacement(replacement: Replacement) -> Violation | None:
    if replacement is NO_REPLACEMENT:
        return None
    if not _STRING_OR_NONE.issuperset(map(type, replacement)):
        return _not_a_string(replacement)
    _, _, collapse_id, topic, _ = replacement
    if collapse_id is not None and len(collapse_id.encode()) > MAX_APNS_COLLAPSE_ID_BYTES:
        return Violation("message.apns.headers", "The length of [apns-collapse-id] header must "
                         "not exceed [64] bytes.", "fcm")
    if topic is not None and not WEB_PUSH_TOPIC.fullmatch(topic):
        return Violation("message.webpush.headers", "The Topic header must be 1 to 32 characters "
                         "of the URL and filename safe base64 alphabet (RFC 8030 section 5.4).",
                         "fcm")
    return None


def _not_a_string(replacement: Replacement) -> Violation:
    path = next(path for (_, path), value in zip(REPLACEMENT_FIELDS, replacement, strict=True)
                if not isinstance(value, str | None))
    return Violation(f"message.{path}", f"Invalid value at 'message.{path}' (TYPE_STRING)", "fcm")


@functools.cache
def shared_validator() -> Validator:
    """One validator per process: the document is read and compiled once, on first use."""
    return Validator()


def make_app(service_accounts: Sequence[Path] = (), *, keep_bodies: bool = False,
             validator: Validator | None = None) -> web.Application:
    """The emulator's application; OAuth is on when ``service_accounts`` names any file."""
    emulator = Emulator(Authority.from_files(list(service_accounts)),
                        validator or shared_validator(), keep_bodies=keep_bodies)
    app = web.Application(client_max_size=64 * 1024)
    app.router.add_post("/v1/projects/{project}/messages:send", emulator.send)
    app.router.add_post("/token", emulator.token)
    app.router.add_post("/_emulator/config", emulator.configure)
    app.router.add_get("/_emulator/requests", emulator.requests)
    app.router.add_get("/_emulator/grants", emulator.grants)
    app.router.add_get("/_emulator/stats", emulator.stats)
    app.router.add_post("/_emulator/reset", emulator.reset)
    app.router.add_get("/healthz", emulator.healthz)
    return app
