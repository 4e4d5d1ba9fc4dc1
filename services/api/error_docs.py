"""The error answers of every operation, declared in the OpenAPI document.

Clients (and the schemathesis run in ``tests/e2e/test_fuzz.py``) read from the document which
statuses an operation can answer and what their bodies look like; every Herald error has the same
body, ``ErrorResponse``. What an operation can answer follows from how it is declared: a scope
means 401, 403 and 429 (every call spends from a budget), a request body 400 (not JSON) and 413,
any input 422, a path parameter 404, a change to a campaign or schedule 409. FastAPI's own 422 body
(``HTTPValidationError``) is replaced: Herald answers validation errors in its own shape.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field

from herald.contracts.http import ErrorResponse
from services.api.auth import api_routes, declared_scope

RETRY_AFTER = {"Retry-After": {"description": "Seconds until a call may succeed",
                               "schema": {"type": "integer"}}}
WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}}
CONFLICT_PREFIXES = ("/v1/campaigns/", "/v1/schedules/")
"""Changes to what lives under these paths are guarded transitions: a campaign or schedule in
the wrong state answers 409."""

LOOKUPS_IN_BODY = frozenset({"/v1/campaigns/preview"})
"""Routes whose body names what they look up (a device, a campaign): 404 when it is unknown."""

DESCRIPTIONS = {
    400: "The request body is not JSON",
    401: "No valid API key (missing, unknown, revoked or expired)",
    403: "The key's role lacks the operation's scope",
    404: "No such resource",
    409: "The resource is in a state that does not allow this",
    413: "The request body is larger than the api accepts",
    422: "The request does not validate",
    429: "The key is over its request rate (or its open event streams), or the address over "
         "its failed authentications",
}


def _error(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {"model": ErrorResponse, "description": DESCRIPTIONS[status]}
    if status == 401:
        response["headers"] = WWW_AUTHENTICATE
    if status == 429:
        response["headers"] = RETRY_AFTER
    return response


def error_statuses(route: APIRoute) -> list[int]:
    """The error statuses ``route`` can answer, from its declaration."""
    statuses = []
    declared = declared_scope(route)
    if declared is not None:
        statuses += [401, 429]  # every call spends from a budget (services/api/gate.py)
        if declared.scope is not None:
            statuses.append(403)
    if route.body_field is not None:
        statuses += [400, 413]
    if route.dependant.path_params or route.path in LOOKUPS_IN_BODY:
        statuses.append(404)
    if _guarded_change(route):
        statuses.append(409)
    if _has_input(route):
        statuses.append(422)
    return sorted(statuses)


def _guarded_change(route: APIRoute) -> bool:
    """A change to an existing campaign or schedule, or a campaign creation (an Idempotency-Key
    still in flight)."""
    changes = (route.methods or set()) - {"GET", "HEAD"}
    existing = bool(route.dependant.path_params) and route.path.startswith(CONFLICT_PREFIXES)
    return bool(changes) and (existing or route.path == "/v1/campaigns")


def _has_input(route: APIRoute) -> bool:
    dependant = route.dependant
    pending = [dependant]
    while pending:
        current = pending.pop()
        if current.query_params or current.header_params or current.path_params:
            return True
        pending.extend(current.dependencies)
    return route.body_field is not None


def document_errors(app: FastAPI) -> None:
    """Declare each operation's error answers (what a route declares itself is kept)."""
    for route in api_routes(app.router.routes):
        for status in error_statuses(route):
            if status in route.responses:
                continue
            route.responses[status] = _error(status)
            # FastAPI renders a response's body from the field it made when the route was built
            route.response_fields[status] = create_model_field(
                name=f"Response_{status}_{route.unique_id}", type_=ErrorResponse,
                mode="serialization")
