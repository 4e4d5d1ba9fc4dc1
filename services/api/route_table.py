"""The route table of ``docs/access.md``, made from the routes' own declarations (the scope each
declares, ``services/api/auth.py``) and the role table (``herald.domain.access``), so that the
document cannot omit a route or name a scope the code does not check:
``python -m services.api.route_table`` prints it, and ``tests/integration/test_access.py``
fails while the document differs."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from fastapi import FastAPI
from starlette.routing import Mount, Route

from herald.domain.access import Role, roles_allowed
from herald.settings import Settings
from services.api.app import create_app
from services.api.auth import DEVICES_READ_ADDS, api_routes, declared_scope

BEGIN = "<!-- route table: python -m services.api.route_table -->"
END = "<!-- end of the route table -->"


def rows(app: FastAPI) -> Iterator[tuple[str, str, str, str]]:
    """Each route (method and path), its scope, the roles whose keys may call it, and what it
    answers more to a key with ``devices:read``."""
    for route in api_routes(app.router.routes):
        declared = declared_scope(route)
        more = (route.openapi_extra or {}).get(DEVICES_READ_ADDS, "")
        if declared is None:
            scope, roles = "open: no key", "anyone"
        elif declared.scope is None:
            scope, roles = "any valid key", ", ".join(role.value for role in Role)
        else:
            scope = f"`{declared.scope.value}`"
            roles = ", ".join(role.value for role in roles_allowed(declared.scope))
        for method in sorted(route.methods or ()):
            yield f"`{method} {route.path}`", scope, roles, more
    for other in app.routes:
        if isinstance(other, Route) and not hasattr(other, "dependant"):
            yield f"`GET {other.path}`", "open: no key", "anyone", ""
        elif isinstance(other, Mount):
            yield f"`GET {other.path}/...`", "open: no key (static files)", "anyone", ""


def markdown(app: FastAPI) -> str:
    """The table as ``docs/access.md`` holds it, between :data:`BEGIN` and :data:`END`."""
    lines = [BEGIN, "", "| route | scope | roles | with `devices:read` (operator, admin) |",
             "|---|---|---|---|"]
    lines += [f"| {route} | {scope} | {roles} | {more} |" for route, scope, roles, more in rows(app)]
    return "\n".join([*lines, "", END])


def documented(text: str) -> str:
    """The table as a document holds it (from :data:`BEGIN` to :data:`END`)."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> None:
    settings = Settings(fcm_endpoint="http://127.0.0.1:1")  # the routes need no real endpoint
    sys.stdout.write(markdown(create_app(settings)) + "\n")


if __name__ == "__main__":
    main()
