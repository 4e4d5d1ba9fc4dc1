"""FCM's answers to a refused send, in Google's shapes.

Every refusal is a ``google.rpc.Status`` body: ``{"error": {"code", "message", "status",
"details": [...]}}``. FCM adds a ``google.firebase.fcm.v1.FcmError`` detail (``errorCode``) to the
faults it names in its ErrorCode reference (and to ``QUOTA_EXCEEDED`` a ``google.rpc.QuotaFailure``
naming the quota exceeded: the project's message rate, or one device's); a payload problem
carries a ``google.rpc.BadRequest`` detail (``fieldViolations``) instead; the project's own
faults (IAM permission, unknown project, a bad OAuth token) carry no FcmError at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from fcm_emulator.discovery import Violation

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
APNS_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.ApnsError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
QUOTA_FAILURE_TYPE = "type.googleapis.com/google.rpc.QuotaFailure"
PROJECT_RATE = ("project:{project}", "Message rate exceeded: the sending rate of messages is too "
                "high.")
DEVICE_RATE = ("device", "Device message rate exceeded: the rate of messages to a particular "
               "device is too high.")
"""(subject, description) of the ``QuotaFailure`` violation: Google's ErrorCode reference says
which quota is named there (a project's, a device's or a topic's message rate) but publishes no
exact texts; these follow its wording."""

BAD_OAUTH_TOKEN = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
    "or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project.")
IAM_DENIED = ("Permission 'cloudmessaging.messages.create' denied on resource "
              "'//cloudresourcemanager.googleapis.com/projects/{project}' (or it may not exist).")
TOO_BIG = Violation("message", "Message is too big", "fcm")


@dataclass(frozen=True)
class Fault:
    """One way FCM refuses a send: HTTP status, ``google.rpc`` status, message, and the
    FcmError ``errorCode`` where FCM sends one."""

    http: int
    status: str
    message: str
    error_code: str | None = None
    apns_error: bool = False
    iam_error_info: bool = False
    quota: tuple[str, str] | None = None
    """The ``QuotaFailure`` violation's (subject, description), for a quota fault."""

    def error(self, project: str) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.http, "message": self.message.format(project=project),
                                 "status": self.status}
        details = self._details(project)
        if details:
            error["details"] = details
        return {"error": error}

    def _details(self, project: str) -> list[dict[str, Any]]:
        details: list[dict[str, Any]] = []
        if self.iam_error_info:
            details.append({"@type": ERROR_INFO_TYPE, "reason": "IAM_PERMISSION_DENIED",
                            "domain": "iam.googleapis.com",
                            "metadata": {"permission": "cloudmessaging.messages.create",
                                         "resource": f"projects/{project}"}})
        if self.apns_error:
            details.append({"@type": APNS_ERROR_TYPE, "statusCode": 403,
                            "reason": "InvalidProviderToken"})
        if self.error_code is not None:
            details.append({"@type": FCM_ERROR_TYPE, "errorCode": self.error_code})
        if self.quota is not None:
            subject, description = self.quota
            details.append({"@type": QUOTA_FAILURE_TYPE, "violations": [
                {"subject": subject.format(project=project), "description": description}]})
        return details


FAULTS: dict[str, Fault] = {
    # About the token (FcmError), or FCM's own state (FcmError).
    "UNREGISTERED": Fault(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"),
    "INVALID_ARGUMENT": Fault(400, "INVALID_ARGUMENT",
                              "The registration token is not a valid FCM registration token",
                              "INVALID_ARGUMENT"),
    "SENDER_ID_MISMATCH": Fault(403, "PERMISSION_DENIED", "SenderId mismatch",
                                "SENDER_ID_MISMATCH"),
    "THIRD_PARTY_AUTH_ERROR": Fault(401, "UNAUTHENTICATED",
                                    "Auth error from APNS or Web Push Service",
                                    "THIRD_PARTY_AUTH_ERROR", apns_error=True),
    "QUOTA_EXCEEDED": Fault(429, "RESOURCE_EXHAUSTED",
                            "Quota exceeded for quota metric 'Send requests'", "QUOTA_EXCEEDED",
                            quota=PROJECT_RATE),
    # FCM's errorCode is QUOTA_EXCEEDED for a device's rate too: the QuotaFailure tells.
    "DEVICE_QUOTA_EXCEEDED": Fault(429, "RESOURCE_EXHAUSTED", "Device message rate exceeded.",
                                   "QUOTA_EXCEEDED", quota=DEVICE_RATE),
    "UNAVAILABLE": Fault(503, "UNAVAILABLE", "The service is currently unavailable.",
                         "UNAVAILABLE"),
    "INTERNAL": Fault(500, "INTERNAL", "Internal error encountered.", "INTERNAL"),
    "UNSPECIFIED_ERROR": Fault(500, "UNKNOWN", "Unknown error.", "UNSPECIFIED_ERROR"),
    # About the project or the credentials: no FcmError.
    "PERMISSION_DENIED": Fault(403, "PERMISSION_DENIED", IAM_DENIED, iam_error_info=True),
    "UNAUTHENTICATED": Fault(401, "UNAUTHENTICATED", BAD_OAUTH_TOKEN),
    "NOT_FOUND": Fault(404, "NOT_FOUND", "Requested entity was not found."),
}
TOKEN_FAULTS = ("UNREGISTERED", "INVALID_ARGUMENT", "SENDER_ID_MISMATCH",
                "THIRD_PARTY_AUTH_ERROR", "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL")
"""The faults ``push_back`` may name: the ones that carry an FcmError."""
INVALID_PAYLOAD = "INVALID_PAYLOAD"
FAIL_ALL_FAULTS = (INVALID_PAYLOAD, "PERMISSION_DENIED", "UNAUTHENTICATED",
                   "THIRD_PARTY_AUTH_ERROR", "SENDER_ID_MISMATCH", "NOT_FOUND")
"""The faults ``fail_all`` may name: what is wrong with every message of a campaign, or with
the project or its credentials."""


def recorded_as(name: str) -> str:
    """What the record says of a fault: FCM's ``errorCode`` where it sends one, else the
    fault's name (its ``google.rpc`` status)."""
    return FAULTS[name].error_code or name


def fault_response(name: str, project: str, retry_after_s: float | None = None) -> web.Response:
    fault = FAULTS[name]
    headers = {"Retry-After": f"{retry_after_s:g}"} if retry_after_s is not None else None
    return web.Response(status=fault.http, body=orjson.dumps(fault.error(project)),
                        headers=headers, content_type="application/json")


def violation_error(violation: Violation, *, with_fcm_error: bool = False) -> dict[str, Any]:
    """400 ``INVALID_ARGUMENT`` with a ``BadRequest`` detail naming the field.

    ``with_fcm_error`` adds ``FcmError INVALID_ARGUMENT`` to violations of FCM's own rules (not to
    what the JSON parser refuses), as some public reports of FCM's answers show it.
    """
    entry = {"field": violation.field, "description": violation.description}
    if not violation.field:  # proto3 JSON leaves an empty string out
        del entry["field"]
    details: list[dict[str, Any]] = [{"@type": BAD_REQUEST_TYPE, "fieldViolations": [entry]}]
    if with_fcm_error and violation.rule == "fcm":
        details.append({"@type": FCM_ERROR_TYPE, "errorCode": "INVALID_ARGUMENT"})
    return {"error": {"code": 400, "message": violation.description, "status": "INVALID_ARGUMENT",
                      "details": details}}


def violation_response(violation: Violation, *, with_fcm_error: bool = False) -> web.Response:
    body = violation_error(violation, with_fcm_error=with_fcm_error)
    return web.Response(status=400, body=orjson.dumps(body), content_type="application/json")
