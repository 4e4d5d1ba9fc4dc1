"""Every error the API returns is JSON: ``{"error": {"code", "message", "details"?}}``.

Codes are stable and machine-readable; messages are for people. Nothing internal (stack traces,
driver messages) ever reaches a client: unexpected failures are logged and answered with a 500
that names no internals.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.domain.archive import ArchiveRecord
from herald.domain.payload import PayloadTooLarge
from herald.domain.personalize import TemplateProblem, TemplateRefused
from herald.domain.purpose import PurposeConflict, PurposeNarrows
from herald.domain.timing import AmbiguousTime
from herald.service_layer.access import KeyNotFound
from herald.service_layer.campaigns import (
    FollowUpAudience,
    IdempotencyInFlight,
    IdempotencyMismatch,
    InvalidChange,
    NotAmendable,
    NotCorrectable,
    NotEditable,
    NothingToAmend,
    NothingToCorrect,
    NothingToFollowUp,
    NotRetargetable,
    NotRetryable,
    SendAtInPast,
)
from herald.service_layer.errors import CampaignArchived
from herald.service_layer.preview import DeviceNotFound
from herald.service_layer.queries import ScheduleNotFound
from herald.service_layer.scheduling import ScheduleEnded
from herald.service_layer.stopping import CampaignNotFound, CannotCancel, CannotPause, CannotResume
from herald.service_layer.test_sends import (
    NotTestable,
    PushDisabled,
    TestedTooOften,
    TooManyDevices,
)
from services.api.log_paths import loggable

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None,
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.details = details


def error_response(status: int, code: str, message: str,
                   details: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def not_found(campaign_id: str) -> ApiError:
    return ApiError(404, "campaign_not_found", f"no campaign {campaign_id}")


def schedule_not_found(schedule_id: str) -> ApiError:
    return ApiError(404, "schedule_not_found", f"no schedule {schedule_id}")


DOMAIN_ERRORS: dict[type[Exception], tuple[int, str]] = {
    CampaignNotFound: (404, "campaign_not_found"),
    DeviceNotFound: (404, "device_not_found"),
    ScheduleNotFound: (404, "schedule_not_found"),
    KeyNotFound: (404, "api_key_not_found"),
    CannotCancel: (409, "not_cancellable"),
    CannotPause: (409, "not_pausable"),
    CannotResume: (409, "not_paused"),
    NotRetargetable: (409, "not_retargetable"),
    NothingToFollowUp: (409, "not_retargetable"),
    NotAmendable: (409, "not_amendable"),
    NothingToAmend: (409, "nothing_to_amend"),
    NotCorrectable: (409, "not_correctable"),
    NothingToCorrect: (409, "nothing_to_correct"),
    NotRetryable: (409, "not_retryable"),
    NotEditable: (409, "not_editable"),
    FollowUpAudience: (422, "follow_up_audience"),
    PurposeConflict: (422, "purpose_reaches_nobody"),
    PurposeNarrows: (422, "purpose_narrows"),
    ScheduleEnded: (409, "schedule_ended"),
    SendAtInPast: (422, "send_at_in_past"),
    AmbiguousTime: (422, "ambiguous_time"),
    IdempotencyMismatch: (422, "idempotency_key_reused"),
    IdempotencyInFlight: (409, "idempotency_key_in_flight"),
    NotTestable: (409, "not_testable"),
    TooManyDevices: (422, "too_many_devices"),
    PushDisabled: (422, "push_disabled"),
    TestedTooOften: (429, "tested_too_often"),
}


HTTP_CODES = {400: "malformed_body", 404: "not_found", 405: "method_not_allowed",
              413: "request_too_large"}


PROBLEM_CODES = {"size": "payload_too_large", "template": "invalid_template",
                 "translation": "invalid_translation"}
"""The error code of a 422 whose first problem is of this kind (``TemplateProblem.kind``)."""


def _validation_details(errors: Sequence[Any]) -> tuple[str, list[dict[str, Any]]]:
    code = "validation_error"
    details: list[dict[str, Any]] = []
    for error in errors:
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, PayloadTooLarge):
            code = "payload_too_large"
        if isinstance(cause, TemplateRefused):
            code = PROBLEM_CODES[cause.problems[0].kind] if code == "validation_error" else code
            details.extend(_problem_detail(list(error.get("loc", ())), p) for p in cause.problems)
            continue
        details.append({"loc": list(error.get("loc", ())), "msg": error.get("msg"),
                        "type": error.get("type")})
    return code, details


def _problem_detail(loc: list[Any], problem: TemplateProblem) -> dict[str, Any]:
    """A content problem as a 422 names it: the field, its variant and, for a placeholder,
    the line and column (from 1) and the offset (from 0) of its ``{{``."""
    position = problem.position
    return {"loc": [*loc, *problem.field.split(".")], "msg": str(problem), "type": problem.kind,
            "field": problem.field, "variant": problem.variant,
            "line": position.line if position else None,
            "column": position.column if position else None,
            "offset": position.offset if position else None}


def _unprocessable(errors: Sequence[Any]) -> JSONResponse:
    code, details = _validation_details(errors)
    message = details[0]["msg"] if len(details) == 1 else f"{len(details)} invalid fields"
    return error_response(422, code, str(message), details)


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details,
                              headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _unprocessable(exc.errors())

    @app.exception_handler(InvalidChange)
    async def _invalid_change(_: Request, exc: InvalidChange) -> JSONResponse:
        return _unprocessable(exc.error.errors())

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail),
                              headers=dict(exc.headers) if exc.headers else None)

    app.add_exception_handler(CampaignArchived, _archived)  # type: ignore[arg-type]
    for error_type, (status, code) in DOMAIN_ERRORS.items():
        app.add_exception_handler(error_type, _domain_handler(status, code))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, INFRASTRUCTURE_ERRORS):  # a store or the broker away: not a bug
            log.warning("%s %s: a dependency is unavailable (%s)", request.method,
                        loggable(request.url.path), type(exc).__name__)
            return error_response(503, "unavailable", "a dependency is unavailable; try again",
                                  headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})
        log.exception("unhandled error on %s %s", request.method, loggable(request.url.path))
        return error_response(500, "internal_error", "internal error; see the server log")


UNAVAILABLE_RETRY_AFTER_S = 5


async def _archived(_: Request, exc: CampaignArchived) -> JSONResponse:
    return error_response(410, "archived", str(exc), [archive_detail(exc.archive)])


def archive_detail(archive: ArchiveRecord) -> dict[str, Any]:
    """A 410 ``archived``'s detail: where the campaign's recipients are, and how to check the
    file (``sha256`` of the stored gzip, its ``lines`` and ``bytes``)."""
    return {"archived_at": archive.at.isoformat(), "location": archive.location,
            "sha256": archive.sha256, "lines": archive.lines, "bytes": archive.bytes}


def _domain_handler(status: int, code: str) -> Any:
    async def handler(_: Request, exc: Exception) -> JSONResponse:
        return error_response(status, code, str(exc))
    return handler
