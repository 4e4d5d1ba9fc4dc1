"""Authentication and authorization of every ``/v1`` route: a FastAPI dependency per route that
declares the scope it needs.

``Authorization: Bearer <key>``: missing, unknown, revoked or expired → 401 with
``WWW-Authenticate: Bearer``; valid but without the scope → 403 naming it. A route's declaration
(``RequireScope``) is what ``tests/integration/test_access.py`` walks to prove that no route was
added without one. Mutating scopes also take a token from the key's request budget in Redis,
shared by every api replica (429 with ``Retry-After`` when spent); cancels never do, so a
responder can always stop a campaign.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute

from herald.domain.access import Actor, ApiKey, Scope
from herald.service_layer.access import Forbidden, Unauthenticated
from services.api.deps import AppServices, Services
from services.api.errors import ApiError

BEARER = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="An API key: `Authorization: Bearer hrld_...`")

RATE_LIMITED = frozenset({Scope.CAMPAIGNS_SEND, Scope.SCHEDULES_WRITE, Scope.DEVICES_WRITE,
                          Scope.KEYS_MANAGE})
"""Scopes of the mutating endpoints whose calls count against a key's request budget."""

ON_BEHALF_OF_HEADER = "X-Requested-By"


@dataclass(frozen=True)
class Caller:
    """Who is calling: the key (its id and name become the actor of what it changes), and what
    the caller says about itself, kept only as information."""

    key: ApiKey
    address: str | None
    on_behalf_of: str | None

    @property
    def actor(self) -> Actor:
        return self.key.as_actor()


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class RequireScope:
    """The dependency a route declares: ``caller: Annotated[Caller, scoped(Scope.X)]``; a scope
    of None asks only for a valid key (``RequireKey()``)."""

    def __init__(self, scope: Scope | None) -> None:
        self.scope = scope

    async def __call__(self, request: Request, services: Services,
                       credentials: Credentials) -> Caller:
        token = credentials.credentials if credentials is not None else None
        authenticator = services.authenticator
        try:
            key = await (authenticator.key_for(token) if self.scope is None
                         else authenticator.authorize(token, self.scope))
        except Unauthenticated as exc:
            raise ApiError(401, "unauthenticated", str(exc),
                           headers={"WWW-Authenticate": "Bearer"}) from exc
        except Forbidden as exc:
            request.state.caller = _caller(request, exc.key)
            raise ApiError(403, "forbidden", str(exc)) from exc
        caller = _caller(request, key)
        request.state.caller = caller
        if self.scope in RATE_LIMITED:
            await _spend(services, key)
        return caller


def _caller(request: Request, key: ApiKey) -> Caller:
    on_behalf_of = request.headers.get(ON_BEHALF_OF_HEADER)
    return Caller(key=key, address=request.client.host if request.client else None,
                  on_behalf_of=on_behalf_of[:200] if on_behalf_of else None)


async def _spend(services: AppServices, key: ApiKey) -> None:
    wait_s = await services.request_budget.spend(key.id)
    if wait_s > 0:
        raise ApiError(429, "rate_limited",
                       f"the key {key.name!r} is over its request rate; retry in {wait_s:.0f} s",
                       headers={"Retry-After": str(max(1, round(wait_s)))})


def scoped(scope: Scope) -> Any:
    """``Depends(RequireScope(scope))``, for ``Annotated[Caller, scoped(...)]``."""
    return Depends(RequireScope(scope))


def RequireKey() -> Any:
    """Any valid key, whatever its role (``/v1/me``)."""
    return Depends(RequireScope(None))


def declared_scope(route: APIRoute) -> RequireScope | None:
    """The ``RequireScope`` a route depends on (directly or through a sub-dependency)."""
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        if isinstance(dependency.call, RequireScope):
            return dependency.call
        pending.extend(dependency.dependencies)
    return None


def api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """Every ``APIRoute`` of an app, through the routers it includes."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from api_routes(included.routes)


def document_scopes(app: FastAPI) -> None:
    """Name each operation's scope in the OpenAPI document (``x-herald-scope``)."""
    for route in api_routes(app.router.routes):
        if (declared := declared_scope(route)) is not None:
            scope = declared.scope.value if declared.scope is not None else "any valid key"
            route.openapi_extra = {**(route.openapi_extra or {}), "x-herald-scope": scope}
