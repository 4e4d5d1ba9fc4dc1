"""``/docs``: Swagger UI over the api's own ``/openapi.json``, its files served by the api.

FastAPI's default page loads Swagger UI from a CDN, on the same origin as the console, where a
script could read the signed-in key: a compromised CDN would own every operator's session. The
files come from fastapi-offline (PyPI), which ships Swagger UI's bundle and style sheet and is
refreshed with Swagger UI's releases (swagger-ui-bundle, the other package that ships them, was
still at Swagger UI 4 from 2022). The page's Content-Security-Policy allows scripts from the api
only, plus the one inline script that starts Swagger UI, by its hash. ReDoc is not served.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _policy(page: str) -> str:
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(page))
    return (f"default-src 'self'; script-src 'self' {hashes}; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def mount(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and its files at ``/docs/assets`` (the app is made with
    ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    page = bytes(get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - Swagger UI",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        swagger_ui_parameters=app.swagger_ui_parameters).body).decode()
    headers = {"Content-Security-Policy": _policy(page), "X-Content-Type-Options": "nosniff",
               "Referrer-Policy": "no-referrer"}

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)
