"""Every change an operator asks for, and how it ended, in the append-only operator log.

A route that changes something names its action (``logged("campaign.cancel")`` in its
``openapi_extra``); the route class below records each call of it once it has been answered:
who (the key that authenticated it, set by ``RequireScope``), what, to which object, from which
address, with which status, including the 403s of keys that lacked the scope. A refused call's
detail is the code it was answered with, never an exception's text. Refusals are counted, one
entry per key, action, status and minute (``OperatorLog``), so that no client writes thousands
of entries. Calls without a valid key (401) and calls over a budget (429, answered by the gate
before any route) are not logged: the first have no actor, both are counted in
``herald_api_refused_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from herald.service_layer.campaigns import InvalidChange
from services.api.auth import Caller
from services.api.bodies import OffLoopRoute
from services.api.deps import AppServices
from services.api.errors import DOMAIN_ERRORS, HTTP_CODES, ApiError

log = logging.getLogger(__name__)

ACTION = "x-herald-action"
TARGETS = {"campaign_id": "campaign", "schedule_id": "schedule", "key_id": "api_key"}


def logged(action: str) -> dict[str, Any]:
    """``openapi_extra`` of a route whose calls go into the operator log as ``action``."""
    return {ACTION: action}


def log_detail(request: Request, detail: str) -> None:
    """What the log line of this call says besides its target (e.g. the campaigns a
    correction created, which one ``Location`` cannot name)."""
    request.state.log_detail = detail


def status_of(exc: Exception) -> int:
    """The status the API answers ``exc`` with (``services/api/errors.py``)."""
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, HTTPException):
        return exc.status_code
    if isinstance(exc, RequestValidationError | InvalidChange):
        return 422
    for error_type, (status, _) in DOMAIN_ERRORS.items():
        if isinstance(exc, error_type):
            return status
    return 500


def code_of(exc: Exception) -> str:
    """The machine-readable code the API answers ``exc`` with (``services/api/errors.py``)."""
    if isinstance(exc, ApiError):
        return exc.code
    if isinstance(exc, HTTPException):
        return HTTP_CODES.get(exc.status_code, "http_error")
    if isinstance(exc, RequestValidationError | InvalidChange):
        return "validation_error"
    for error_type, (_, code) in DOMAIN_ERRORS.items():
        if isinstance(exc, error_type):
            return code
    return "internal_error"


class OperatorLoggedRoute(OffLoopRoute):
    """An ``APIRoute`` that records the calls of routes marked with ``logged(...)`` (and, as
    every ``OffLoopRoute``, parses their bodies off the event loop)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        action = (self.openapi_extra or {}).get(ACTION)
        if action is None:
            return handler

        async def handle_and_log(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as exc:  # the answer's code, never the exception's text
                await _record(request, action, status_of(exc), None, f"answered {code_of(exc)}")
                raise
            await _record(request, action, response.status_code,
                          response.headers.get("location"),
                          getattr(request.state, "log_detail", None))
            return response

        return handle_and_log


async def _record(request: Request, action: str, status_code: int, location: str | None,
                  detail: str | None) -> None:
    caller: Caller | None = getattr(request.state, "caller", None)
    if caller is None:
        return
    services: AppServices = request.app.state.services
    kind, target = _target(action, request.path_params, location)
    campaign_id = request.path_params.get("campaign_id") or (
        target if kind == "campaign" else None)
    try:
        await services.operator_log.record(
            actor=caller.actor, action=action, status_code=status_code, target_kind=kind,
            target_id=target, campaign_id=campaign_id, address=caller.address,
            on_behalf_of=caller.on_behalf_of, detail=detail)
    except Exception:  # the change itself stands; losing its log line is logged here
        log.exception("operator log: could not record %s by %s (%d)", action,
                      caller.actor.label, status_code)


def _target(action: str, params: dict[str, Any], location: str | None) -> tuple[str | None,
                                                                               str | None]:
    """The object acted on: what a ``Location`` header names (a campaign or key just
    created), else the route's id parameter."""
    if location:
        kind = {"campaigns": "campaign", "schedules": "schedule", "api-keys": "api_key"}
        parts = location.strip("/").split("/")
        if len(parts) >= 3 and parts[1] in kind:
            return kind[parts[1]], parts[2]
    for name, kind_of in TARGETS.items():
        if name in params:
            return kind_of, str(params[name])
    return action.split(".")[0], None
