"""FCM HTTP v1 client on aiohttp.

Why not ``firebase_admin.messaging.send_each_async``: it runs on httpx and, measured on this
machine type, tops out near 400 messages/s on a core, against about 10,000/s for the same requests
on aiohttp (``bench/transport/`` repeats the comparison). The OAuth tokens come from google-auth
(``herald/adapters/oauth.py``). The request is FCM's documented REST call
(``projects.messages.send``) with the headers the official SDK sends; answers are read as
Google's ``google.rpc.Status`` and classified as ``herald/domain/fcm_errors.py`` says.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import aiohttp
import orjson
from aiohttp.abc import AbstractStreamWriter
from yarl import URL

from herald.adapters.oauth import AccessTokens, TokenUnavailable, service_account_grant
from herald.domain.fcm_errors import SENT, FcmError, SendResult
from herald.settings import Settings

MAX_RETRY_AFTER_S = 3600.0
CONNECT_TIMEOUT_S = 5.0
_DELAY_SECONDS = re.compile(r"-?\d{1,9}(\.\d+)?")
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
QUOTA_FAILURE_TYPE = "type.googleapis.com/google.rpc.QuotaFailure"
VIOLATION_TEXTS = ("subject", "description", "quotaMetric", "quotaId")
"""The fields of a ``QuotaFailure`` violation that say which quota it is."""
TOKEN_FIELDS = frozenset({"message.token", "message.fid"})


def _herald_version() -> str:
    try:
        return version("herald")
    except PackageNotFoundError:
        return "0"


HERALD_VERSION = _herald_version()
HEADERS = {
    "Content-Type": "application/json",
    # What firebase-admin sends: FCM answers errors in its v2 format (FcmError details) only
    # with this header.
    "X-GOOG-API-FORMAT-VERSION": "2",
    "X-Firebase-Client": f"herald/{HERALD_VERSION}",
    "User-Agent": f"herald/{HERALD_VERSION} aiohttp/{aiohttp.__version__}",
}

_BY_GRPC_STATUS = {
    "INVALID_ARGUMENT": FcmError.INVALID_PAYLOAD,
    "NOT_FOUND": FcmError.NOT_FOUND,
    "PERMISSION_DENIED": FcmError.PERMISSION_DENIED,
    "UNAUTHENTICATED": FcmError.UNAUTHENTICATED,
    "RESOURCE_EXHAUSTED": FcmError.QUOTA_EXCEEDED,
    "UNAVAILABLE": FcmError.UNAVAILABLE,
    "INTERNAL": FcmError.INTERNAL,
}
_BY_HTTP_STATUS = {
    400: FcmError.INVALID_PAYLOAD,
    401: FcmError.UNAUTHENTICATED,
    403: FcmError.PERMISSION_DENIED,
    404: FcmError.NOT_FOUND,
    429: FcmError.QUOTA_EXCEEDED,
    500: FcmError.INTERNAL,
    503: FcmError.UNAVAILABLE,
}
_FCM_CODES = frozenset({FcmError.UNREGISTERED, FcmError.SENDER_ID_MISMATCH,
                        FcmError.QUOTA_EXCEEDED, FcmError.UNAVAILABLE, FcmError.INTERNAL,
                        FcmError.THIRD_PARTY_AUTH_ERROR, FcmError.UNSPECIFIED_ERROR})
"""FcmError ``errorCode`` values recorded as they are (INVALID_ARGUMENT needs a closer look)."""




def parse_error(status: int, body: bytes) -> FcmError:
    """An FCM error answer as Herald records it (see ``herald/domain/fcm_errors.py``).

    FCM's own ``FcmError`` detail decides where there is one, except that ``INVALID_ARGUMENT``
    means a bad token only when it is about the token (a field violation on ``message.token``,
    or Google's "registration token" message); any other is the request's fault. Without an
    FcmError, Google's status decides, then the HTTP status (a proxy's HTML page, say); a 5xx
    without a recognised code is ``UNAVAILABLE``, which is retried. A ``QUOTA_EXCEEDED`` is one
    device's (``DEVICE_QUOTA_EXCEEDED``) only when its ``QuotaFailure`` says so.
    """
    error = _error_object(body)
    details = [d for d in error.get("details") or () if isinstance(d, dict)] \
        if isinstance(error.get("details"), list) else []
    code = _classify(status, error, details)
    if code is FcmError.QUOTA_EXCEEDED and _device_rate(details):
        return FcmError.DEVICE_QUOTA_EXCEEDED
    return code


def _classify(status: int, error: dict[str, Any], details: list[dict[str, Any]]) -> FcmError:
    fcm_code = next((d.get("errorCode") for d in details
                     if str(d.get("@type", "")).endswith("FcmError")), None)
    if fcm_code == FcmError.INVALID_ARGUMENT:
        return FcmError.INVALID_ARGUMENT if _about_token(error, details) \
            else FcmError.INVALID_PAYLOAD
    if fcm_code in _FCM_CODES:
        return FcmError(fcm_code)
    by_status = _BY_GRPC_STATUS.get(str(error.get("status")))
    if by_status is not None:
        return by_status
    if status in _BY_HTTP_STATUS:
        return _BY_HTTP_STATUS[status]
    return FcmError.UNAVAILABLE if status >= 500 else FcmError.UNSPECIFIED_ERROR


def _device_rate(details: list[dict[str, Any]]) -> bool:
    """Whether a ``QUOTA_EXCEEDED`` is about one device's message rate.

    Google's ErrorCode reference gives one code to three limits (the project's message rate, a
    device's, a topic's) and says a ``google.rpc.QuotaFailure`` detail names the one exceeded;
    it does not publish the names. Herald reads it as a device's only when there is such a
    detail and every violation in it names a device (its subject, description, quota metric or
    id); anything else, no detail included, is the project's quota and slows every request."""
    violations = [violation for detail in details
                  if str(detail.get("@type", "")) == QUOTA_FAILURE_TYPE
                  and isinstance(detail.get("violations"), list)
                  for violation in detail["violations"]]
    return bool(violations) and all(
        isinstance(v, dict) and "device" in " ".join(str(v.get(k, "")) for k in VIOLATION_TEXTS)
        .lower() for v in violations)


def _about_token(error: dict[str, Any], details: list[dict[str, Any]]) -> bool:
    for detail in details:
        if str(detail.get("@type", "")) != BAD_REQUEST_TYPE:
            continue
        violations = detail.get("fieldViolations")
        if isinstance(violations, list) and any(
                isinstance(v, dict) and v.get("field") in TOKEN_FIELDS for v in violations):
            return True
    return "registration token" in str(error.get("message", "")).lower()


def error_message(body: bytes) -> str | None:
    """Google's ``error.message``, shortened for a log line."""
    message = _error_object(body).get("message")
    return message[:500] if isinstance(message, str) else None


def _error_object(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else {}


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds, given as delay-seconds or as an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    if _DELAY_SECONDS.fullmatch(value):
        return min(max(0.0, float(value)), MAX_RETRY_AFTER_S)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # "-0000": the date is in UTC, no local time involved
        moment = moment.replace(tzinfo=UTC)
    return min(max(0.0, moment.timestamp() - time.time()), MAX_RETRY_AFTER_S)


STALL_S = 1.0
"""A loop that did not run for this long was stopped (SIGSTOP, a stalled VM): no timeout fires
before the answers that arrived meanwhile are read."""
STALL_GRACE_S = 1.0
WATCH_TICK_S = 0.1


class StallWatch:
    """Notices when this process's event loop was not running: a tick every 100 ms."""

    def __init__(self) -> None:
        self._last_tick = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick())

    def stalled(self) -> bool:
        """The loop has not ticked for a while: the process is just back from a stop."""
        return time.monotonic() - self._last_tick > STALL_S

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(WATCH_TICK_S)
            self._last_tick = time.monotonic()


class FcmClient:
    """Sends pre-encoded FCM v1 request bodies over a keep-alive connection pool.

    The answer's timeout (``HERALD_FCM_TIMEOUT_S``) is Herald's own, not aiohttp's: when a
    process the kernel stopped (SIGSTOP, a stalled VM) runs again, every timeout is due at once,
    and aiohttp's would fire before the answers that arrived meanwhile (already in the socket)
    are read; they would be recorded as "no answer" although FCM answered. Herald's timeout
    waits a moment more when the loop was stopped, so they are recorded as FCM said.
    """

    def __init__(self, session: aiohttp.ClientSession, settings: Settings,
                 tokens: AccessTokens | None) -> None:
        self._session = session
        # Parsed once: aiohttp parses a str URL again on every request.
        self._url = URL(f"{settings.fcm_endpoint}/v1/projects/{settings.fcm_project_id}"
                        "/messages:send")
        self._tokens = tokens
        # The connection is bounded apart: a request that never left was not delivered.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=min(CONNECT_TIMEOUT_S,
                                                                      settings.fcm_timeout_s))
        self._answer_s = settings.fcm_timeout_s
        self._stalls = StallWatch()

    def close(self) -> None:
        self._stalls.close()

    async def send(self, body: bytes, may_send: Callable[[], bool] | None = None) -> SendResult:
        """One request. ``may_send`` is asked once more right before the request's bytes leave
        (aiohttp holds the headers back to write them with the body): a process stopped by the
        kernel between Herald's own checks and that moment sends nothing when it runs again
        after a cancel or after losing its work (``WITHHELD``)."""
        headers, credential = HEADERS, None
        if self._tokens is not None:
            try:
                credential = await self._tokens.header()
            except TokenUnavailable as exc:
                return SendResult(FcmError.OAUTH_REFUSED if exc.refused
                                  else FcmError.CONNECTION_ERROR,
                                  message=f"OAuth token endpoint: {exc.message} (asked again "
                                  "after a back-off of up to a minute)", attempted=False)
            headers = {**HEADERS, "Authorization": credential}
        return await self._post(LastCheckedBody(body, may_send) if may_send else body, headers,
                                credential)

    async def _post(self, body: bytes | LastCheckedBody, headers: dict[str, str],
                    credential: str | None) -> SendResult:
        deadline = _Deadline(self._answer_s, self._stalls)
        try:
            async with self._session.post(self._url, data=body, headers=headers,
                                          timeout=self._timeout) as response:
                payload = await response.read()
                if response.status == 200:
                    return SENT
                return SendResult(parse_error(response.status, payload),
                                  parse_retry_after(response.headers.get("Retry-After")),
                                  error_message(payload), credential=credential)
        except asyncio.CancelledError:
            if deadline.expired():  # sent, and no answer in time: FCM may have delivered it
                return SendResult(FcmError.TIMEOUT, message="no answer within "
                                                            "HERALD_FCM_TIMEOUT_S")
            raise
        except aiohttp.ConnectionTimeoutError:
            return SendResult(FcmError.CONNECTION_ERROR, message="connection timed out")
        except aiohttp.ClientError as exc:
            if isinstance(exc.__cause__, Withheld) or isinstance(exc, Withheld):
                return WITHHELD
            return SendResult(FcmError.CONNECTION_ERROR, message=type(exc).__name__)
        finally:
            deadline.cancel()

    def rejected(self, result: SendResult) -> None:
        """FCM refused the token ``result`` was sent with: the next request gets a new one."""
        if self._tokens is not None and result.credential is not None:
            self._tokens.rejected(result.credential)


class Withheld(OSError):
    """The last check before a request's bytes left said no."""


WITHHELD = SendResult(FcmError.CONNECTION_ERROR, message="withheld before it left",
                      attempted=False, withheld=True)


class LastCheckedBody(aiohttp.BytesPayload):
    """A request body that asks ``may_send`` before it is written (and with it the headers,
    which aiohttp buffers to write together): the last moment before a request leaves."""

    def __init__(self, body: bytes, may_send: Callable[[], bool]) -> None:
        super().__init__(body, content_type="application/json")
        self._may_send = may_send

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter,
                                content_length: int | None) -> None:
        if not self._may_send():
            raise Withheld("withheld: the campaign was stopped, or this pod lost its work")
        await super().write_with_length(writer, content_length)


class _Deadline:
    """Cancels the current task ``answer_s`` from now, unless the loop was just stopped (then
    a little later, once what arrived meanwhile has been read)."""

    __slots__ = ("_handle", "_loop", "_stalls", "_task", "_timed_out")

    def __init__(self, answer_s: float, stalls: StallWatch) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._stalls = stalls
        self._timed_out = False
        stalls.start()
        self._handle = self._loop.call_later(answer_s, self._expire)

    def _expire(self) -> None:
        if self._stalls.stalled():
            self._handle = self._loop.call_later(STALL_GRACE_S, self._expire)
            return
        self._timed_out = True
        if self._task is not None:
            self._task.cancel()

    def expired(self) -> bool:
        """This deadline cancelled the task (and nothing else did): the cancel is taken back."""
        return bool(self._timed_out and self._task is not None and self._task.uncancel() == 0)

    def cancel(self) -> None:
        self._handle.cancel()


def open_session(settings: Settings) -> aiohttp.ClientSession:
    """HTTP session sized for the sender's concurrency (one connection per request in flight).
    FCM sets no cookies: a dummy jar spares every request the cookie filtering."""
    connector = aiohttp.TCPConnector(limit=settings.sender_concurrency, ttl_dns_cache=300,
                                     enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                 json_serialize=lambda o: orjson.dumps(o).decode())


def access_tokens(settings: Settings) -> AccessTokens | None:
    """Credentials for Google's endpoint (or a stand-in that checks them); none without a
    service-account file."""
    if settings.fcm_credentials is None:
        return None
    return AccessTokens(service_account_grant(settings.fcm_credentials))
