"""Request bodies parsed and checked off the event loop.

FastAPI parses a body's JSON and validates it against the route's model on the event loop,
before the route runs. For a campaign that is most of the work a request costs: JSON of up to
a few megabytes, then every placeholder of up to 101 variants (lexed and, unless in the usual
shape, parsed by Jinja2: about 100 µs each). Done on the loop, a 400 KB preview held ``/healthz``
for 5.1 s and a responder's cancel for 3.5 s. Here:

- every route's JSON is parsed in a worker thread (:class:`OffLoopRoute`, FastAPI's documented
  way to customise the request: a ``Request`` subclass whose ``json()`` does it);
- a route whose model is costly to validate declares its body as :func:`checked_later` (FastAPI
  then only checks that it is a JSON object, and still documents the model) and validates it with
  :class:`BodyChecks`, in a worker thread, at most :data:`CONCURRENT_CHECKS` at once: a 422 from
  there is the same as FastAPI's own;
- a route whose use case checks content it makes itself (an edit, a follow-up: the stored
  content with the request's changes) checks those texts first in a worker thread
  (:meth:`BodyChecks.templates_ahead`): the use case's own check, on the loop, then finds each
  verdict remembered (``herald.domain.personalize``).

The threads share the interpreter's lock with the loop. A thread that holds it gives it up when
another asks, after the switch interval: CPython's 5 ms made a responder's cancel (some twenty
awaits, each waking the loop that then waits for the lock) take 125 ms instead of 19 during the
largest create (2026-11-27, load 6). The api's process sets :data:`LOCK_SWITCH_INTERVAL_S`
instead (``services/api/__main__.py``); the interval costs nothing while only one thread runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from typing import Any, TypeVar

import anyio
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, PlainValidator, ValidationError

from herald.domain.personalize import MAX_PLACEHOLDERS, check_text, placeholder_count
from herald.domain.rendering import MAX_TRANSLATIONS

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

LOCK_SWITCH_INTERVAL_S = 0.0005
"""How long a worker thread keeps the interpreter's lock once the event loop asks for it."""
CONCURRENT_CHECKS = 2
"""Bodies checked at once (one per core here); others wait for a place, off the loop."""


class OffLoopRequest(Request):
    """A request whose JSON body is parsed in a worker thread (``json.loads``, as Starlette)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self._json = await anyio.to_thread.run_sync(json.loads, body)
        return self._json


class OffLoopRoute(APIRoute):
    """An ``APIRoute`` whose request body is parsed off the event loop."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def parsed_off_loop(request: Request) -> Response:
            return await handler(OffLoopRequest(request.scope, request.receive))

        return parsed_off_loop


def _json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("the body must be a JSON object")
    return value


def checked_later(model: type[BaseModel]) -> PlainValidator:
    """The metadata of a body parameter ``Annotated[dict[str, Any], checked_later(Model)]``:
    FastAPI accepts any JSON object and documents ``Model``; the route validates it with
    :class:`BodyChecks`."""
    return PlainValidator(_json_object, json_schema_input_type=model)


class BodyChecks:
    """Validates a body against its model in a worker thread, at most ``concurrent`` at once
    (built by the composition root: a limiter belongs to the running loop)."""

    def __init__(self, concurrent: int = CONCURRENT_CHECKS) -> None:
        self._limiter = anyio.CapacityLimiter(concurrent)

    async def __call__(self, model: type[M], body: dict[str, Any]) -> M:
        """``body`` as a ``model``; a 422 naming each field otherwise, as FastAPI's own."""
        try:
            return await self.run(partial(model.model_validate, body))
        except ValidationError as exc:
            raise RequestValidationError(
                [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, within the same limit."""
        return await anyio.to_thread.run_sync(work, limiter=self._limiter)

    async def templates_ahead(self, *sources: object) -> None:
        """Check every text of ``sources`` (stored contents, or requests that change one) as a
        template, in a worker thread; the problems are the use case's to report."""
        texts = [text for source in sources for text in texts_of(source)]
        await self.run(partial(_check_all, texts))


def texts_of(source: object) -> Iterator[str]:
    """The texts of a content or of a request that changes one: title, body, data values and
    its translations' (absent ones skipped)."""
    for name in ("title", "body"):
        if isinstance(text := getattr(source, name, None), str):
            yield text
    yield from (getattr(source, "data", None) or {}).values()
    for translation in (getattr(source, "translations", None) or {}).values():
        yield from texts_of(translation)


AHEAD_PLACEHOLDERS = 2 * (1 + MAX_TRANSLATIONS) * MAX_PLACEHOLDERS
"""Placeholders checked ahead at most: a valid content has at most (1 + 100) x 50, and an edit
or a follow-up checks two (the stored one and the request's). Past that, the content is over the
rule anyway: the use case refuses it by its size first, without reading its templates."""


def _check_all(texts: list[str]) -> None:
    checked = 0
    for text in texts:
        count = placeholder_count(text)
        if count <= MAX_PLACEHOLDERS:  # else refused by its count, nothing to check ahead
            checked += count
            if checked > AHEAD_PLACEHOLDERS:
                return
        check_text("", text)
