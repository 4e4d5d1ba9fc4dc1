"""``herald approve`` shows what the approval covers and sends the digest of what it showed;
``herald keys`` names each key's owner (issue 31, point 1), against an in-process fake of the
API's transport (the real API: tests/e2e/test_approval_bypasses.py)."""

from __future__ import annotations

import functools
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from herald_cli import commands as cli

DIGEST = "d" * 64
AWAITING = {"id": "a" * 24, "name": "launch", "status": "awaiting_approval",
            "title": "[bold]Live[/bold] now", "body": "Tap to watch",
            "data": {"landingUrl": "https://example.com/live"}, "image_url": None,
            "translations": {"es": {"title": "En vivo", "body": "Mira"}}, "options": None,
            "audience": {"topics": ["fans"]}, "retarget": None, "audience_estimate": 270,
            "rate_per_s": None, "lane": "standard", "rollout": None,
            "due_at": "2030-01-01T09:00:00Z", "content_digest": DIGEST}
APPROVED = {**AWAITING, "status": "pending",
            "approval": {"by": {"name": "reviewer"}, "at": "2030-01-01T08:59:00Z"}}


class FakeApi:
    """Answers GETs with ``shown`` and POSTs with ``approved``; keeps what was asked."""

    def __init__(self, shown: dict[str, Any], approved: dict[str, Any]) -> None:
        self.shown, self.approved = shown, approved
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=self.shown if request.method == "GET" else self.approved)

    def posted(self) -> list[Any]:
        return [orjson.loads(r.content) for r in self.requests if r.method == "POST"]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    def invoke(fake: FakeApi, *args: str, answer: str | None = None) -> Any:
        monkeypatch.setattr(cli, "Endpoint", functools.partial(
            cli.Endpoint, transport=httpx.MockTransport(fake.handle)))
        return CliRunner().invoke(cli.app, list(args), input=answer, catch_exceptions=False)
    return invoke


def test_approve_shows_the_content_and_sends_the_digest_it_showed(run: Any) -> None:
    fake = FakeApi(AWAITING, APPROVED)
    result = run(fake, "approve", "a" * 24, answer="y\n")
    assert result.exit_code == 0, result.output
    for shown in ("[bold]Live[/bold] now", "Tap to watch", "landingUrl = https://example.com/live",
                  "[es]", "En vivo", '{"topics":["fans"]}: 270 devices', "uncapped", DIGEST):
        assert shown in result.stdout, shown
    assert fake.posted() == [{"digest": DIGEST}]
    assert "approved by reviewer" in result.stdout


def test_approve_answered_no_approves_nothing(run: Any) -> None:
    fake = FakeApi(AWAITING, APPROVED)
    result = run(fake, "approve", "a" * 24, answer="n\n")
    assert result.exit_code == 1 and fake.posted() == []


def test_approve_yes_does_not_ask_and_still_sends_the_digest(run: Any) -> None:
    fake = FakeApi(AWAITING, APPROVED)
    assert run(fake, "approve", "a" * 24, "--yes").exit_code == 0
    assert fake.posted() == [{"digest": DIGEST}]


def test_keys_are_minted_for_an_owner_and_listed_with_it(run: Any) -> None:
    key = {"id": "k1", "owner": "dana@example.com", "role": "operator", "name": "laptop",
           "last_used_at": None, "revoked_at": None, "expires_at": None, "secret": "hrld_k1_s"}
    fake = FakeApi({"items": [key], "next_cursor": None}, key)
    created = run(fake, "keys", "create", "--name", "laptop", "--role", "operator",
                  "--owner", "dana@example.com")
    assert created.exit_code == 0, created.output
    assert fake.posted() == [{"name": "laptop", "role": "operator", "owner": "dana@example.com"}]
    listed = run(fake, "keys", "list")
    assert "dana@example.com" in listed.stdout and "laptop" in listed.stdout
