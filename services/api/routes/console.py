"""``/console``: the operator console, static files served by the api (no build step, nothing
fetched from elsewhere). The files need no key; every data call they make carries one."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
CONSOLE_PATH = "/console"
SECURITY_HEADERS = {
    # Everything the console runs or loads is its own file: no inline script, no other origin.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class ConsoleFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount(app: FastAPI) -> None:
    """Serve the console at ``/console/`` (``/console`` redirects there)."""
    app.mount(CONSOLE_PATH, ConsoleFiles(directory=CONSOLE_DIR, html=True), name="console")
