"""A fake of the API's transport for ``herald``'s command tests (tests/unit/test_cli_*.py)."""

from __future__ import annotations

import functools
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from herald_cli import commands as cli


class FakeApi:
    """Answers each request with ``answer`` and keeps what was asked."""

    def __init__(self, answer: dict[str, Any], status: int = 200) -> None:
        self.answer, self.status = answer, status
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.answer)

    def body(self, index: int = -1) -> Any:
        return orjson.loads(self.requests[index].content)


def invoker(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``herald`` invoked with its arguments against a fake's transport (a test's ``run``)."""
    def invoke(fake: FakeApi, *args: str) -> Any:
        monkeypatch.setattr(cli, "Endpoint", functools.partial(
            cli.Endpoint, transport=httpx.MockTransport(fake.handle)))
        return CliRunner().invoke(cli.app, list(args), catch_exceptions=False)
    return invoke
