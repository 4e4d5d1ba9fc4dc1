"""Unknown query parameters are refused, not ignored.

FastAPI reads the query parameters a route declares and drops the rest, so a misspelt filter
(``GET /v1/campaigns?stauts=failed``) answers as if there were none: the whole list, with
nothing to say it was not filtered. Every ``/v1`` route (and the operations routes) runs
``known_query_only`` first: a name the route does not declare is a 422 that names it, like any
other input the route cannot take."""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from services.api.errors import ApiError


async def known_query_only(request: Request) -> None:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    unknown = sorted(set(request.query_params) - _declared(route))
    if unknown:
        raise ApiError(422, "unknown_query_parameter",
                       f"unknown query parameter{'s' if len(unknown) > 1 else ''}: "
                       + ", ".join(name[:100] for name in unknown[:10]),
                       details=[{"loc": ["query", name[:100]]} for name in unknown[:10]])


_DECLARED: dict[str, frozenset[str]] = {}


def _declared(route: APIRoute) -> frozenset[str]:
    """The query parameters ``route`` and its dependencies declare (by the name sent), worked
    out once per route (``unique_id``: its name, path and methods)."""
    declared = _DECLARED.get(route.unique_id)
    if declared is None:
        declared = _DECLARED[route.unique_id] = frozenset(_names(route.dependant))
    return declared


def _names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _names(sub)
    return names
