"""FCM's answers as Google describes them, and what Herald concludes from each
(herald/adapters/fcm.py, herald/domain/fcm_errors.py).

Bodies follow Google's ``google.rpc.Status``: ``{"error": {"code", "message", "status",
"details": [...]}}``, where FCM adds a ``google.firebase.fcm.v1.FcmError`` detail with its
``errorCode`` and payload problems carry a ``google.rpc.BadRequest`` detail with
``fieldViolations``. The shapes below are Google's (the ErrorCode reference; the bad-token answer
as real FCM gives it, firebase-admin-java issue 1064), not the emulator's.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from fcm_emulator import faults
from fcm_emulator.discovery import Violation
from herald.adapters.fcm import SENT, SendResult, parse_error, parse_retry_after
from herald.domain.fcm_errors import (
    CONFIGURATION_ERRORS,
    ONE_DEVICE,
    RETRYABLE,
    TOKEN_IS_DEAD,
    Consequence,
    FcmError,
    consequence,
    may_retire_mismatched,
    token_is_dead,
    token_is_unusable,
    wrong_project,
)

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


def google_body(http: int, grpc: str, error_code: str | None = None, *, message: str = "m",
                extra_details: list[dict[str, Any]] | None = None) -> bytes:
    details = list(extra_details or [])
    if error_code is not None:
        details.append({"@type": FCM_ERROR_TYPE, "errorCode": error_code})
    error: dict[str, Any] = {"code": http, "message": message, "status": grpc}
    if details:
        error["details"] = details
    return json.dumps({"error": error}).encode()


def violation(field: str, description: str = "Invalid value") -> dict[str, Any]:
    return {"@type": BAD_REQUEST_TYPE,
            "fieldViolations": [{"field": field, "description": description}]}


# --- what each of Google's answers is recorded as ---------------------------------------------------
@pytest.mark.parametrize(
    ("http", "grpc", "error_code", "expected"),
    [
        (404, "NOT_FOUND", "UNREGISTERED", FcmError.UNREGISTERED),
        (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", FcmError.QUOTA_EXCEEDED),
        (503, "UNAVAILABLE", "UNAVAILABLE", FcmError.UNAVAILABLE),
        (500, "INTERNAL", "INTERNAL", FcmError.INTERNAL),
        (403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", FcmError.SENDER_ID_MISMATCH),
        (401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", FcmError.THIRD_PARTY_AUTH_ERROR),
        (400, "INVALID_ARGUMENT", "UNSPECIFIED_ERROR", FcmError.UNSPECIFIED_ERROR),
    ],
)
def test_fcm_error_codes_are_read_from_the_fcm_error_detail(
        http: int, grpc: str, error_code: str, expected: FcmError) -> None:
    assert parse_error(http, google_body(http, grpc, error_code)) is expected


def test_a_bad_token_as_real_fcm_answers_it_is_a_dead_token() -> None:
    body = google_body(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                       message="The registration token is not a valid FCM registration token")
    assert parse_error(400, body) is FcmError.INVALID_ARGUMENT


def test_an_invalid_argument_whose_violation_is_on_the_token_is_a_dead_token() -> None:
    body = google_body(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", message="Request contains an "
                       "invalid argument.", extra_details=[violation("message.token")])
    assert parse_error(400, body) is FcmError.INVALID_ARGUMENT


@pytest.mark.parametrize("body", [
    # a payload problem as Google answers it: a BadRequest detail and no FcmError
    google_body(400, "INVALID_ARGUMENT", message="Message is too big",
                extra_details=[violation("message", "Message is too big")]),
    google_body(400, "INVALID_ARGUMENT", message="Invalid value at 'message.data[0].value'",
                extra_details=[violation("message.data[0].value")]),
    # an FcmError INVALID_ARGUMENT that is not about the token: the request's fault
    google_body(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", message="Invalid android ttl",
                extra_details=[violation("message.android.ttl")]),
    google_body(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                message="Request contains an invalid argument."),
    google_body(400, "INVALID_ARGUMENT"),
    b"",
])
def test_an_invalid_argument_not_about_the_token_is_the_payloads_fault(body: bytes) -> None:
    assert parse_error(400, body) is FcmError.INVALID_PAYLOAD


def test_permission_denied_without_an_fcm_error_is_a_configuration_error() -> None:
    body = google_body(403, "PERMISSION_DENIED", message="Permission 'cloudmessaging.messages."
                       "create' denied on resource '//cloudresourcemanager.googleapis.com/projects/"
                       "x' (or it may not exist).", extra_details=[
                           {"@type": ERROR_INFO_TYPE, "reason": "IAM_PERMISSION_DENIED"}])
    assert parse_error(403, body) is FcmError.PERMISSION_DENIED
    assert consequence(FcmError.PERMISSION_DENIED) is Consequence.STOP


def test_not_found_without_an_fcm_error_is_the_project_not_the_token() -> None:
    body = google_body(404, "NOT_FOUND", message="Requested entity was not found.")
    assert parse_error(404, body) is FcmError.NOT_FOUND
    assert not token_is_dead(FcmError.NOT_FOUND)


def test_an_oauth_rejection_is_unauthenticated_and_asks_for_a_new_token() -> None:
    body = google_body(401, "UNAUTHENTICATED", message="Request had invalid authentication "
                       "credentials. Expected OAuth 2 access token.")
    assert parse_error(401, body) is FcmError.UNAUTHENTICATED
    assert consequence(FcmError.UNAUTHENTICATED) is Consequence.REAUTH


def test_the_fcm_error_detail_is_found_after_other_details() -> None:
    body = google_body(404, "NOT_FOUND", "UNREGISTERED", extra_details=[
        {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": []}])
    assert parse_error(404, body) is FcmError.UNREGISTERED


def test_an_unknown_error_code_falls_back_to_googles_status() -> None:
    assert parse_error(503, google_body(503, "UNAVAILABLE", "SOMETHING_NEW")) is FcmError.UNAVAILABLE
    assert parse_error(403, google_body(403, "PERMISSION_DENIED", "SOMETHING_NEW")) \
        is FcmError.PERMISSION_DENIED


@pytest.mark.parametrize(("grpc", "expected"), [
    ("INVALID_ARGUMENT", FcmError.INVALID_PAYLOAD),
    ("NOT_FOUND", FcmError.NOT_FOUND),
    ("PERMISSION_DENIED", FcmError.PERMISSION_DENIED),
    ("UNAUTHENTICATED", FcmError.UNAUTHENTICATED),
    ("RESOURCE_EXHAUSTED", FcmError.QUOTA_EXCEEDED),
    ("UNAVAILABLE", FcmError.UNAVAILABLE),
    ("INTERNAL", FcmError.INTERNAL),
])
def test_without_an_fcm_error_googles_status_decides(grpc: str, expected: FcmError) -> None:
    assert parse_error(418, google_body(418, grpc)) is expected


@pytest.mark.parametrize(("http", "expected"), [
    (400, FcmError.INVALID_PAYLOAD), (401, FcmError.UNAUTHENTICATED),
    (403, FcmError.PERMISSION_DENIED), (404, FcmError.NOT_FOUND),
    (429, FcmError.QUOTA_EXCEEDED), (500, FcmError.INTERNAL), (503, FcmError.UNAVAILABLE),
    (502, FcmError.UNAVAILABLE), (504, FcmError.UNAVAILABLE), (418, FcmError.UNSPECIFIED_ERROR),
])
@pytest.mark.parametrize("body", [b"", b"<html><body>Bad Gateway</body></html>", b"\xff\xfe\x00",
                                  b"null", b"[1, 2]", b'"error"', b"42", b"{}", b'{"error": {}}',
                                  b'{"error": {"details": null}}', b'{"error": "boom"}',
                                  b'{"error": {"details": 7}}', b'{"error": ["UNREGISTERED"]}',
                                  b'{"error": {"details": [5, "x", null]}}', b'{"err'])
def test_without_a_usable_body_the_http_status_decides(http: int, expected: FcmError,
                                                       body: bytes) -> None:
    assert parse_error(http, body) is expected


def test_no_answer_without_an_fcm_error_ever_retires_a_token() -> None:
    """Only FCM's own FcmError about a token says the token is bad: a proxy's 404 or 400, or a
    Google status alone, never does."""
    for http in (400, 401, 403, 404):
        for body in (b"", google_body(http, "NOT_FOUND"), google_body(http, "INVALID_ARGUMENT"),
                     google_body(http, "PERMISSION_DENIED")):
            assert not token_is_unusable(parse_error(http, body))

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


# --- what Herald does about each ---------------------------------------------------------------------
def test_sent_is_ok_and_not_retryable() -> None:
    assert SENT.ok
    assert not SENT.retryable
    assert SENT.consequence is None


@pytest.mark.parametrize("error", list(FcmError))
def test_send_result_flags(error: FcmError) -> None:
    result = SendResult(error, retry_after_s=1.0)
    assert not result.ok
    assert result.retryable is (error in RETRYABLE)
    assert result.consequence is consequence(error)


def test_what_is_retried() -> None:
    """Push-back and outages (nothing was delivered); never a timeout, which may have been."""
    assert frozenset({FcmError.QUOTA_EXCEEDED, FcmError.DEVICE_QUOTA_EXCEEDED,
                      FcmError.UNAVAILABLE, FcmError.INTERNAL,
                      FcmError.CONNECTION_ERROR}) == RETRYABLE
    assert consequence(FcmError.TIMEOUT) is Consequence.UNCERTAIN


def test_what_stops_the_campaign() -> None:
    assert frozenset({FcmError.INVALID_PAYLOAD, FcmError.PERMISSION_DENIED,
                      FcmError.THIRD_PARTY_AUTH_ERROR, FcmError.NOT_FOUND,
                      FcmError.OAUTH_REFUSED}) == CONFIGURATION_ERRORS
    assert all(consequence(error) is Consequence.STOP for error in CONFIGURATION_ERRORS)


def test_dead_tokens_and_unusable_tokens() -> None:
    assert frozenset({FcmError.UNREGISTERED, FcmError.INVALID_ARGUMENT}) == TOKEN_IS_DEAD
    assert token_is_unusable(FcmError.SENDER_ID_MISMATCH)
    assert not token_is_dead(FcmError.SENDER_ID_MISMATCH)
    assert not RETRYABLE & TOKEN_IS_DEAD
    assert not CONFIGURATION_ERRORS & TOKEN_IS_DEAD
    assert all(consequence(error) is Consequence.RECIPIENT for error in TOKEN_IS_DEAD)


@pytest.mark.parametrize("error", sorted(CONFIGURATION_ERRORS | {FcmError.UNAUTHENTICATED,
                                                                  FcmError.TIMEOUT,
                                                                  FcmError.QUOTA_EXCEEDED,
                                                                  FcmError.DEVICE_QUOTA_EXCEEDED}))
def test_configuration_errors_and_outages_never_make_a_token_unusable(error: FcmError) -> None:
    assert not token_is_unusable(error)


@pytest.mark.parametrize(("mismatched", "answered", "wrong", "retire"), [
    (0, 0, False, False),
    (5, 10, False, False),     # too few answers to tell
    (0, 49, False, False),
    (0, 50, False, True),      # none of 50 of another project: retire the few to come
    (85, 85, False, False),    # every token of another project, not yet sure enough
    (86, 86, True, False),     # sure: the credentials are of another project
    (10, 20, False, False),    # half (the former rule stopped here)
    (35, 50, False, True),     # 70% of 50: sure enough the credentials are right
    (40, 50, False, False),    # 80% of 50: not sure yet either way
    (700, 1000, False, True),  # a project migration that left 70% of old tokens
    (950, 1000, True, False),
    (900, 1000, False, False),  # in between: neither
    (1, 500, False, True),
])
def test_many_mismatched_tokens_mean_a_wrong_project(mismatched: int, answered: int, wrong: bool,
                                                     retire: bool) -> None:
    assert wrong_project(mismatched, answered) is wrong
    assert may_retire_mismatched(mismatched, answered) is retire


# --- the emulator's answers, read by Herald ---------------------------------------------------------
HERALD_READS = {
    "UNREGISTERED": FcmError.UNREGISTERED, "INVALID_ARGUMENT": FcmError.INVALID_ARGUMENT,
    "SENDER_ID_MISMATCH": FcmError.SENDER_ID_MISMATCH,
    "THIRD_PARTY_AUTH_ERROR": FcmError.THIRD_PARTY_AUTH_ERROR,
    "QUOTA_EXCEEDED": FcmError.QUOTA_EXCEEDED, "UNAVAILABLE": FcmError.UNAVAILABLE,
    "DEVICE_QUOTA_EXCEEDED": FcmError.DEVICE_QUOTA_EXCEEDED,
    "INTERNAL": FcmError.INTERNAL, "PERMISSION_DENIED": FcmError.PERMISSION_DENIED,
    "UNAUTHENTICATED": FcmError.UNAUTHENTICATED, "NOT_FOUND": FcmError.NOT_FOUND,
    "UNSPECIFIED_ERROR": FcmError.UNSPECIFIED_ERROR,
}


@pytest.mark.parametrize("fault", sorted(faults.FAULTS))
def test_every_fault_the_emulator_answers_means_to_herald_what_google_says(fault: str) -> None:
    response = faults.fault_response(fault, "demo")
    assert isinstance(response.body, bytes)
    assert parse_error(response.status, response.body) is HERALD_READS[fault]


@pytest.mark.parametrize("with_fcm_error", [False, True])
def test_a_payload_violation_the_emulator_answers_is_the_payloads_fault(
        with_fcm_error: bool) -> None:
    violation = Violation("message.android.ttl", "Invalid duration", "fcm")
    body = json.dumps(faults.violation_error(violation, with_fcm_error=with_fcm_error)).encode()
    assert parse_error(400, body) is FcmError.INVALID_PAYLOAD


# --- QUOTA_EXCEEDED: the project's rate, or one device's? ------------------------------------------
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"


def quota_answer(*details: dict[str, object]) -> bytes:
    return json.dumps({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                 "message": "Quota exceeded.", "details": list(details)}}).encode()


FCM_QUOTA = {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
             "errorCode": "QUOTA_EXCEEDED"}


def violations(*texts: dict[str, str]) -> dict[str, object]:
    return {"@type": QUOTA_FAILURE, "violations": list(texts)}


@pytest.mark.parametrize(("body", "read"), [
    # Google's ErrorCode reference: a QuotaFailure names the quota exceeded.
    (quota_answer(FCM_QUOTA, violations({"subject": "device", "description": "Device message "
                                         "rate exceeded"})), FcmError.DEVICE_QUOTA_EXCEEDED),
    (quota_answer(violations({"quotaMetric": "fcm.googleapis.com/device_messages"})),
     FcmError.DEVICE_QUOTA_EXCEEDED),
    # The project's rate, and every doubt: the project's (it slows everything).
    (quota_answer(FCM_QUOTA, violations({"subject": "project:demo", "description": "Message "
                                         "rate exceeded"})), FcmError.QUOTA_EXCEEDED),
    (quota_answer(FCM_QUOTA), FcmError.QUOTA_EXCEEDED),
    (quota_answer(FCM_QUOTA, violations()), FcmError.QUOTA_EXCEEDED),
    (quota_answer(FCM_QUOTA, violations({"subject": "device", "description": "device rate"},
                                        {"subject": "project:demo"})), FcmError.QUOTA_EXCEEDED),
    (quota_answer(FCM_QUOTA, {"@type": QUOTA_FAILURE, "violations": "device"}),
     FcmError.QUOTA_EXCEEDED),
    # A project's quota as FCM was reported answering it (firebase/firebase-admin-go#719): no
    # FcmError, an ErrorInfo of the project's per-minute limit.
    (quota_answer({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                   "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
                   "metadata": {"quota_metric": "fcm.googleapis.com/send_requests",
                                "quota_unit": "1/min/{project}",
                                "quota_limit": "SendsPerMinutePerProject"}}),
     FcmError.QUOTA_EXCEEDED),
])
def test_a_429_is_one_device_s_only_when_its_quota_failure_says_so(body: bytes,
                                                                  read: FcmError) -> None:
    assert parse_error(429, body) is read


def test_only_a_device_s_push_back_spares_the_project() -> None:
    assert frozenset({FcmError.DEVICE_QUOTA_EXCEEDED}) == ONE_DEVICE
    assert consequence(FcmError.DEVICE_QUOTA_EXCEEDED) is Consequence.RETRY
    assert not token_is_unusable(FcmError.DEVICE_QUOTA_EXCEEDED)
