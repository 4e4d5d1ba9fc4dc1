"""The gate in front of every ``/v1`` route: who is calling, and may they call now, decided from
the request's headers alone, before a byte of its body is received.

FastAPI reads and parses a request's body before it solves the route's dependencies, so a check
made there comes after the cost (a 16 MB body without a key was parsed whole before its 401).
This pure ASGI middleware answers first:

- an address over its failed authentications: 429 ``too_many_failed_authentications`` with
  ``Retry-After``, whatever key it presents (a guesser learns nothing until its budget refills);
- no valid key (missing, unknown, revoked, expired): 401 ``unauthenticated``, one failure
  spent from the address's budget;
- a key over the budget of the route it calls (reads, changes, or cancels, each its own; refused
  calls spend too): 429 ``rate_limited`` with ``Retry-After``.

A refusal of a request that carries a body closes the connection, so the server stops reading
it. What passes goes on with the key in the request's state, where ``RequireScope`` (the routes'
dependency) finds it and checks the scope (403).
"""

from __future__ import annotations

import logging

from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.adapters.rate_limit import Budget
from herald.domain.access import ApiKey
from herald.domain.access import Scope as KeyScope
from herald.observability import API_REFUSED
from herald.service_layer.access import Unauthenticated
from services.api.auth import KEY_STATE, api_routes, declared_scope
from services.api.deps import AppServices
from services.api.log_paths import loggable

log = logging.getLogger(__name__)

GATED_PREFIX = "/v1"
READ_SCOPES = frozenset({KeyScope.CAMPAIGNS_READ, KeyScope.SCHEDULES_READ, KeyScope.PODS_READ,
                         KeyScope.OPERATOR_LOG_READ, None})


def budget_of(route: APIRoute) -> Budget:
    """The budget a route's calls spend from, by the scope it declares."""
    declared = declared_scope(route)
    scope = declared.scope if declared is not None else None
    if scope is KeyScope.CAMPAIGNS_CANCEL:
        return Budget.CANCEL
    return Budget.READ if scope in READ_SCOPES else Budget.WRITE


class RouteBudgets:
    """Which budget a request spends from, found by matching it against the app's routes (an
    unknown path, bound for a 404, spends from reads)."""

    def __init__(self, routes: list[BaseRoute]) -> None:
        self._routes = [(route, budget_of(route)) for route in api_routes(routes)
                        if route.path.startswith(GATED_PREFIX)]

    def __call__(self, scope: Scope) -> Budget:
        for route, budget in self._routes:
            if route.matches(scope)[0] is Match.FULL:
                return budget
        return Budget.READ


class AccessGate:
    def __init__(self, app: ASGIApp, budgets: RouteBudgets) -> None:
        self._app = app
        self._budgets = budgets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == GATED_PREFIX
                                           or path.startswith(GATED_PREFIX + "/")):
            await self._app(scope, receive, send)
            return
        services: AppServices = scope["app"].state.services
        try:
            refusal = await self._refusal(scope, services)
        except INFRASTRUCTURE_ERRORS as exc:  # a store is down: /readyz says which
            log.warning("access gate: could not decide on %s %s: %s unavailable",
                        scope["method"], loggable(path), type(exc).__name__)
            refusal = _error(503, "unavailable", "the api cannot check keys right now; retry",
                             {"Retry-After": "1"})
        except Exception:
            log.exception("access gate: could not decide on %s %s", scope["method"],
                          loggable(path))
            refusal = _error(503, "unavailable", "the api cannot check keys right now; retry",
                             {"Retry-After": "1"})
        if refusal is None:
            await self._app(scope, receive, send)
            return
        if _has_body(scope):
            refusal.headers["Connection"] = "close"
        await refusal(scope, receive, send)  # a response that never calls receive

    async def _refusal(self, scope: Scope, services: AppServices) -> JSONResponse | None:
        """None if the request may go on (its key put in its state), else the answer."""
        address = scope["client"][0] if scope.get("client") else None
        blocked_s = await services.failed_authentications.blocked_for(address)
        if blocked_s > 0:
            API_REFUSED.labels("auth_throttled").inc()
            return _error(429, "too_many_failed_authentications",
                          "too many failed authentications from this address; retry later",
                          {"Retry-After": _seconds(blocked_s)})
        try:
            key = await services.authenticator.key_for(_bearer(scope))
        except Unauthenticated as exc:
            API_REFUSED.labels("unauthenticated").inc()
            await services.failed_authentications.record(address)
            return _error(401, "unauthenticated", str(exc), {"WWW-Authenticate": "Bearer"})
        wait_s = await services.request_budget.spend(key.id, self._budgets(scope))
        if wait_s > 0:
            API_REFUSED.labels("rate_limited").inc()
            return _error(429, "rate_limited",
                          f"the key {key.name!r} is over its request rate; retry in "
                          f"{_seconds(wait_s)} s", {"Retry-After": _seconds(wait_s)})
        _remember(scope, key)
        return None


def _remember(scope: Scope, key: ApiKey) -> None:
    scope.setdefault("state", {})[KEY_STATE] = key


def _bearer(scope: Scope) -> str | None:
    scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _has_body(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def _seconds(wait_s: float) -> str:
    return str(max(1, round(wait_s + 0.49)))


def _error(status: int, code: str, message: str, headers: dict[str, str]) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status,
                        headers=headers)
