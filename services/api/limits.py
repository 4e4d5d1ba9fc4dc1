"""Request bodies over their route's limit are refused with 413 JSON before they are read whole:
by their ``Content-Length``, or while streaming for a body sent without one.

Each route's limit is what its body can need (:class:`RouteBodyLimits`): a device import
(``POST /v1/devices/bulk``, 10,000 devices) ``HERALD_API_MAX_BODY_BYTES``; a streamed import
(``POST /v1/devices/import``, NDJSON read as it arrives, never held whole)
``HERALD_API_MAX_IMPORT_BYTES``; every other route what the largest campaign can be
(``herald.contracts.sizes.CAMPAIGN_BODY_MAX_BYTES``: no other body carries more), so that a
campaign's route never reads 16 MiB to refuse it after parsing. The OpenAPI document shows
each operation's limit as ``x-herald-max-body-bytes``.

A body that declares its length is refused before a byte of it is read, so that refusal changes
nothing. A streamed import sent without a length (chunked) is cut where it passes the limit: the
batches written before stay written (importing them again changes nothing), and the answer is
the same 413.

FastAPI's own ``max_body_size`` answers 413 in plain text, outside the application's exception
handlers; every Herald error is JSON with a machine-readable code, hence this middleware.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.auth import api_routes

MAX_BODY = "x-herald-max-body-bytes"
DEVICE_IMPORT = "x-herald-device-import"
STREAMED = "streamed"


def device_import() -> dict[str, Any]:
    """``openapi_extra`` of the route that imports devices in bulk (the largest parsed bodies)."""
    return {DEVICE_IMPORT: True}


def streamed_import(media_type: str, description: str) -> dict[str, Any]:
    """``openapi_extra`` of a route that reads its body as a stream of ``media_type`` (not
    parsed by FastAPI, so its request body is described here)."""
    return {DEVICE_IMPORT: STREAMED, "requestBody": {"required": True, "content": {
        media_type: {"schema": {"type": "string", "description": description}}}}}


class RouteBodyLimits:
    """The largest body each route takes: ``import_bytes`` for a device import,
    ``streamed_bytes`` for a streamed one, ``other_bytes`` for every other route (and a path no
    route has)."""

    def __init__(self, routes: list[BaseRoute], *, import_bytes: int, streamed_bytes: int,
                 other_bytes: int) -> None:
        self.other_bytes = other_bytes
        self._limits = [(route, streamed_bytes if marked == STREAMED else import_bytes)
                        for route in api_routes(routes)
                        if (marked := (route.openapi_extra or {}).get(DEVICE_IMPORT))]

    def limit_of(self, route: APIRoute) -> int:
        return next((limit for own, limit in self._limits if own is route), self.other_bytes)

    def __call__(self, scope: Scope) -> int:
        for route, limit in self._limits:
            if route.matches(scope)[0] is Match.FULL:
                return limit
        return self.other_bytes

    def document(self, app: FastAPI) -> None:
        """Name each operation's limit in the OpenAPI document (those that take a body)."""
        for route in api_routes(app.router.routes):
            streamed = (route.openapi_extra or {}).get(DEVICE_IMPORT) == STREAMED
            if route.body_field is not None or streamed:
                route.openapi_extra = {**(route.openapi_extra or {}),
                                       MAX_BODY: self.limit_of(route)}


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    def __init__(self, app: ASGIApp, limits: RouteBodyLimits) -> None:
        self._app = app
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        max_bytes = self._limits(scope)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await self._refuse(send, max_bytes)
            return
        started = False
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send, max_bytes)

    async def _refuse(self, send: Send, max_bytes: int) -> None:
        body = orjson.dumps({"error": {
            "code": "request_too_large",
            "message": f"this route's request bodies are limited to {max_bytes} bytes"}})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
