"""FCM's error model (herald/adapters/fcm.py) and the emulator's error bodies that feed it.

Bodies follow FCM HTTP v1's documented shape: ``{"error": {"code", "message", "status",
"details": [{"@type": ".../google.firebase.fcm.v1.FcmError", "errorCode": ...}]}}``.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from fcm_emulator import faults, server
from herald.adapters.fcm import SENT, SendResult, parse_error, parse_retry_after
from herald.domain.fcm_errors import RETRYABLE, TOKEN_IS_DEAD, FcmError

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"


def fcm_body(http: int, grpc: str, error_code: str | None = None, *,
             extra_details: list[dict[str, Any]] | None = None) -> bytes:
    details = list(extra_details or [])
    if error_code is not None:
        details.append({"@type": FCM_ERROR_TYPE, "errorCode": error_code})
    error: dict[str, Any] = {"code": http, "message": "m", "status": grpc}
    if details:
        error["details"] = details
    return json.dumps({"error": error}).encode()


# --- parse_error -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("http", "grpc", "error_code"),
    [
        (404, "NOT_FOUND", "UNREGISTERED"),
        (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"),
        (503, "UNAVAILABLE", "UNAVAILABLE"),
        (500, "INTERNAL", "INTERNAL"),
        (403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"),
        (401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR"),
    ],
)
def test_fcm_v1_error_codes_are_read_from_details(http: int, grpc: str, error_code: str) -> None:
    assert parse_error(http, fcm_body(http, grpc, error_code)) is FcmError(error_code)


def test_error_code_in_details_wins_over_status_and_http() -> None:
    # THIRD_PARTY_AUTH_ERROR comes with 401/UNAUTHENTICATED, which alone would mean our own auth.
    body = fcm_body(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR")
    assert parse_error(401, body) is FcmError.THIRD_PARTY_AUTH_ERROR


def test_fcm_error_detail_is_found_after_other_details() -> None:
    bad_request = {"@type": "type.googleapis.com/google.rpc.BadRequest",
                   "fieldViolations": [{"field": "message.token", "description": "bad"}]}
    body = fcm_body(400, "INVALID_ARGUMENT", "UNREGISTERED", extra_details=[bad_request])
    assert parse_error(400, body) is FcmError.UNREGISTERED


def test_unknown_error_code_falls_back_to_grpc_status() -> None:
    body = fcm_body(404, "NOT_FOUND", "SOMETHING_NEW_IN_2030")
    assert parse_error(404, body) is FcmError.UNREGISTERED


def test_non_string_error_code_and_non_object_details_are_ignored() -> None:
    details = ["UNREGISTERED", 7, None, {"errorCode": ["UNREGISTERED"]}, {"errorCode": 404}]
    body = json.dumps({"error": {"status": "UNAVAILABLE", "details": details}}).encode()
    assert parse_error(503, body) is FcmError.UNAVAILABLE


@pytest.mark.parametrize(
    ("grpc", "expected"),
    [
        ("INVALID_ARGUMENT", FcmError.INVALID_ARGUMENT),
        ("NOT_FOUND", FcmError.UNREGISTERED),
        ("PERMISSION_DENIED", FcmError.SENDER_ID_MISMATCH),
        ("RESOURCE_EXHAUSTED", FcmError.QUOTA_EXCEEDED),
        ("UNAVAILABLE", FcmError.UNAVAILABLE),
        ("INTERNAL", FcmError.INTERNAL),
        ("UNAUTHENTICATED", FcmError.UNAUTHENTICATED),
    ],
)
def test_without_details_the_grpc_status_decides(grpc: str, expected: FcmError) -> None:
    # An HTTP status that disagrees shows that the body's status is what is read.
    assert parse_error(418, fcm_body(418, grpc)) is expected


@pytest.mark.parametrize(
    ("http", "expected"),
    [
        (400, FcmError.INVALID_ARGUMENT),
        (401, FcmError.UNAUTHENTICATED),
        (403, FcmError.SENDER_ID_MISMATCH),
        (404, FcmError.UNREGISTERED),
        (429, FcmError.QUOTA_EXCEEDED),
        (500, FcmError.INTERNAL),
        (503, FcmError.UNAVAILABLE),
    ],
)
def test_without_a_usable_body_the_http_status_decides(http: int, expected: FcmError) -> None:
    assert parse_error(http, b"") is expected
    assert parse_error(http, b'{"error": {"status": "NOT_A_STATUS"}}') is expected


@pytest.mark.parametrize(
    "body",
    [b"", b"<html><body>Bad Gateway</body></html>", b"\xff\xfe\x00garbage", b"null", b"[]",
     b"[1, 2]", b'"error"', b"42", b"{}", b'{"error": {}}', b'{"error": {"details": []}}',
     b'{"error": {"details": null}}', b'{"err', b'{"error": "boom"}', b'{"error": null}',
     b'{"error": 5}', b'{"error": ["UNREGISTERED"]}', b'{"error": {"details": 7}}',
     b'{"error": {"details": true}}'],
)
def test_garbage_bodies_never_raise_and_fall_back_to_http_status(body: bytes) -> None:
    assert parse_error(404, body) is FcmError.UNREGISTERED
    assert parse_error(418, body) is FcmError.UNSPECIFIED_ERROR


@pytest.mark.parametrize("http", [502, 504])
def test_gateway_errors_with_unparseable_bodies_are_retryable(http: int) -> None:
    """FCM's guidance (and RETRYABLE's docstring): retry 5xx. A proxy's 502/504 page is a 5xx."""
    error = parse_error(http, b"<html><body>Gateway error</body></html>")
    assert SendResult(error).retryable


# --- parse_retry_after -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", 1.0), ("0", 0.0), ("30", 30.0), ("120", 120.0), ("2.5", 2.5), ("-5", 0.0)],
)
def test_retry_after_in_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize("value", [None, ""])
def test_missing_retry_after_is_none(value: str | None) -> None:
    assert parse_retry_after(value) is None


@pytest.mark.parametrize("value", ["soon", "1 minute", "Wed, 99 Foo 2015 07:28:00 GMT", "1s"])
def test_unreadable_retry_after_is_none(value: str) -> None:
    assert parse_retry_after(value) is None


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e400", "nan"])
def test_retry_after_is_never_infinite_or_nan(value: str) -> None:
    """Not HTTP delay-seconds (1*DIGIT); it must not become an endless backoff."""
    result = parse_retry_after(value)
    assert result is None or math.isfinite(result)


def test_retry_after_as_http_date_in_the_future() -> None:
    header = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    result = parse_retry_after(header)
    assert result is not None
    assert 118.0 <= result <= 120.0  # the header has whole seconds; a little time passes


def test_retry_after_as_http_date_in_the_past_is_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_retry_after_http_date_is_read_as_gmt() -> None:
    moment = datetime.fromtimestamp(time.time() + 3600, UTC).replace(microsecond=0)
    result = parse_retry_after(format_datetime(moment, usegmt=True))
    assert result is not None
    assert abs(result - (moment.timestamp() - time.time())) < 2.0


# --- SendResult and the error sets -----------------------------------------------------------------
def test_sent_is_ok_and_not_retryable() -> None:
    assert SENT.ok
    assert not SENT.retryable
    assert SENT.error is None


@pytest.mark.parametrize("error", list(FcmError))
def test_send_result_flags(error: FcmError) -> None:
    result = SendResult(error, retry_after_s=1.0)
    assert not result.ok
    assert result.retryable is (error in RETRYABLE)


def test_retryable_set() -> None:
    assert frozenset({FcmError.QUOTA_EXCEEDED, FcmError.UNAVAILABLE, FcmError.INTERNAL,
                      FcmError.TIMEOUT, FcmError.CONNECTION_ERROR}) == RETRYABLE


def test_token_is_dead_set() -> None:
    assert frozenset({FcmError.UNREGISTERED, FcmError.INVALID_ARGUMENT}) == TOKEN_IS_DEAD


def test_a_dead_token_is_never_retried() -> None:
    assert not RETRYABLE & TOKEN_IS_DEAD


@pytest.mark.parametrize("error", [FcmError.SENDER_ID_MISMATCH, FcmError.THIRD_PARTY_AUTH_ERROR,
                                   FcmError.UNAUTHENTICATED, FcmError.QUOTA_EXCEEDED])
def test_project_level_errors_do_not_kill_the_token(error: FcmError) -> None:
    assert error not in TOKEN_IS_DEAD


# --- the emulator's bodies parse back ---------------------------------------------------------------
def emulated(code: str, retry_after_s: float | None = None) -> tuple[int, bytes, str | None]:
    """Status, body and Retry-After header of the emulator's answer for error ``code``."""
    response = faults.fault_response(code, "demo", retry_after_s=retry_after_s)
    assert isinstance(response.body, bytes)
    return response.status, response.body, response.headers.get("Retry-After")


@pytest.mark.parametrize("code", faults.TOKEN_FAULTS)
def test_emulator_error_response_parses_back_to_its_code(code: str) -> None:
    status, body, _ = emulated(code)
    assert parse_error(status, body) is FcmError(code)


@pytest.mark.parametrize("code", ["UNREGISTERED", "INVALID_ARGUMENT", "SENDER_ID_MISMATCH",
                                  "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"])
def test_emulator_status_and_http_code_agree_with_its_error_code(code: str) -> None:
    """Even read without details, the emulator's answer means the same error (not so for
    THIRD_PARTY_AUTH_ERROR: 401 UNAUTHENTICATED alone means Herald's own credentials)."""
    status, body, _ = emulated(code)
    error = json.loads(body)["error"]
    del error["details"]
    assert parse_error(status, json.dumps({"error": error}).encode()) is FcmError(code)
    assert parse_error(status, b"") is FcmError(code)


@pytest.mark.parametrize(("prefix", "code"), sorted(server.TOKEN_PREFIXES.items()))
def test_emulator_token_prefixes_mean_what_herald_reads(prefix: str, code: str) -> None:
    expected = {"unregistered-": FcmError.UNREGISTERED, "invalid-": FcmError.INVALID_ARGUMENT,
                "mismatch-": FcmError.SENDER_ID_MISMATCH,
                "apnsauth-": FcmError.THIRD_PARTY_AUTH_ERROR,
                "quota-": FcmError.QUOTA_EXCEEDED, "unavailable-": FcmError.UNAVAILABLE,
                "internal-": FcmError.INTERNAL}[prefix]
    status, body, _ = emulated(code)
    assert parse_error(status, body) is expected


def test_emulator_prefixes_cover_dead_and_retryable_errors() -> None:
    parsed = {parse_error(*emulated(code)[:2]) for code in server.TOKEN_PREFIXES.values()}
    assert parsed >= TOKEN_IS_DEAD
    assert {FcmError.QUOTA_EXCEEDED, FcmError.UNAVAILABLE, FcmError.INTERNAL} <= parsed & RETRYABLE


@pytest.mark.parametrize("seconds", [1.0, 0.25, 30.0, 2.5])
def test_emulator_retry_after_header_parses_back(seconds: float) -> None:
    _, _, header = emulated("QUOTA_EXCEEDED", retry_after_s=seconds)
    assert parse_retry_after(header) == seconds


def test_emulator_sends_no_retry_after_unless_asked() -> None:
    assert emulated("UNAVAILABLE")[2] is None
