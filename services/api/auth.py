"""Authorization of every ``/v1`` route: a FastAPI dependency per route that declares the scope
it needs.

The key itself was found by the gate in front of the app (``services/api/gate.py``: 401 for a
missing, unknown, revoked or expired key, 429 over a budget), from the headers alone, before
the body was read; ``RequireScope`` takes the gate's verdict from the request's state and checks
the scope: valid but without it → 403 naming it. A route's declaration is what
``tests/integration/test_access.py`` walks to prove that no route was added without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute

from herald.contracts.http import QuietHoursAsked, overrides_quiet_hours
from herald.domain.access import Actor, ApiKey, Role, Scope, allows
from herald.domain.lanes import LANES_FIRST_TO_LAST, Lane
from herald.domain.purpose import Purpose
from herald.service_layer.access import Forbidden
from services.api.errors import ApiError

BEARER = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="An API key: `Authorization: Bearer hrld_...`")

KEY_STATE = "api_key"
"""Where the gate leaves the caller's key in the request's state."""

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

    async def __call__(self, request: Request, _credentials: Credentials) -> Caller:
        key: ApiKey | None = getattr(request.state, KEY_STATE, None)
        if key is None:  # the gate lets no /v1 request through without one
            raise ApiError(401, "unauthenticated", "send Authorization: Bearer <API key>",
                           headers={"WWW-Authenticate": "Bearer"})
        caller = _caller(request, key)
        request.state.caller = caller
        if self.scope is not None and not allows(key.role, self.scope):
            raise ApiError(403, "forbidden", str(Forbidden(key, self.scope)))
        return caller


def lanes_of(role: Role, urgent_roles: frozenset[str]) -> list[Lane]:
    """The lanes a key of ``role`` may send in, most urgent first (none without the scope)."""
    if not allows(role, Scope.CAMPAIGNS_SEND):
        return []
    return [lane for lane in LANES_FIRST_TO_LAST
            if lane is not Lane.URGENT or role.value in urgent_roles]


def require_lane(caller: Caller, lane: Lane | None, urgent_roles: frozenset[str]) -> None:
    """Only keys of the roles in ``HERALD_URGENT_ROLES`` (operator and admin by default) send
    in the ``urgent`` lane: 403 ``lane_not_allowed`` for any other."""
    if lane is Lane.URGENT and caller.key.role.value not in urgent_roles:
        raise ApiError(403, "lane_not_allowed",
                       f"the key {caller.key.name!r} ({caller.key.role.value}) may not send in the "
                       f"urgent lane (roles allowed: {', '.join(sorted(urgent_roles)) or 'none'})")


def purposes_of(role: Role, transactional_roles: frozenset[str]) -> list[Purpose]:
    """The purposes a key of ``role`` may send with (none without the scope)."""
    if not allows(role, Scope.CAMPAIGNS_SEND):
        return []
    return [purpose for purpose in Purpose
            if purpose is not Purpose.TRANSACTIONAL or role.value in transactional_roles]


def require_purpose(caller: Caller, purpose: Purpose | None,
                    transactional_roles: frozenset[str]) -> None:
    """Only keys of the roles in ``HERALD_TRANSACTIONAL_ROLES`` (operator and admin by
    default) send ``transactional`` campaigns, which reach devices that opted out of
    marketing: 403 ``purpose_not_allowed`` for any other."""
    if purpose is Purpose.TRANSACTIONAL and caller.key.role.value not in transactional_roles:
        raise ApiError(403, "purpose_not_allowed",
                       f"the key {caller.key.name!r} ({caller.key.role.value}) may not send "
                       f"transactional campaigns (roles allowed: "
                       f"{', '.join(sorted(transactional_roles)) or 'none'})")


def require_frequency_cap(caller: Caller, choice: str | None,
                          frequency_cap_roles: frozenset[str]) -> None:
    """Only keys of the roles in ``HERALD_FREQUENCY_CAP_ROLES`` (operator and admin by
    default) give a campaign its own frequency cap, or none (``none`` sends past the cap
    every person's other campaigns count towards): 403 ``frequency_cap_not_allowed`` for
    any other."""
    if choice is not None and caller.key.role.value not in frequency_cap_roles:
        raise ApiError(403, "frequency_cap_not_allowed",
                       f"the key {caller.key.name!r} ({caller.key.role.value}) may not set a "
                       f"campaign's frequency_cap (roles allowed: "
                       f"{', '.join(sorted(frequency_cap_roles)) or 'none'})")


def require_quiet_hours(caller: Caller, asked: QuietHoursAsked,
                        quiet_hours_roles: frozenset[str]) -> None:
    """Only keys of the roles in ``HERALD_QUIET_HOURS_ROLES`` (operator and admin by default)
    give a campaign quiet hours of its own, or none (``off`` sends at any hour): 403
    ``quiet_hours_not_allowed`` for any other. Choosing ``hold`` or ``skip`` within the
    setting's window needs nothing more than the right to send."""
    if overrides_quiet_hours(asked) and caller.key.role.value not in quiet_hours_roles:
        raise ApiError(403, "quiet_hours_not_allowed",
                       f"the key {caller.key.name!r} ({caller.key.role.value}) may not set a "
                       f"campaign's own quiet_hours window or turn them off (roles allowed: "
                       f"{', '.join(sorted(quiet_hours_roles)) or 'none'})")


def _caller(request: Request, key: ApiKey) -> Caller:
    on_behalf_of = request.headers.get(ON_BEHALF_OF_HEADER)
    return Caller(key=key, address=request.client.host if request.client else None,
                  on_behalf_of=on_behalf_of[:200] if on_behalf_of else None)


def scoped(scope: Scope) -> Any:
    """``Depends(RequireScope(scope))``, for ``Annotated[Caller, scoped(...)]``."""
    return Depends(RequireScope(scope))


def RequireKey() -> Any:
    """Any valid key, whatever its role (``/v1/me``)."""
    return Depends(RequireScope(None))


DEVICES_READ_ADDS = "x-herald-devices-read"


def devices_read_adds(what: str) -> dict[str, Any]:
    """``openapi_extra`` of a route that answers more to a key with ``devices:read``: ``what``
    (the OpenAPI document and docs/access.md's table show it)."""
    return {DEVICES_READ_ADDS: what}


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
