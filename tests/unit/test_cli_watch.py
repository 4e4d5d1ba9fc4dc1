"""``herald campaigns watch`` reads server-sent events: the format, and what it does when the
stream breaks off (against an in-process fake of the API's transport; the real endpoint is
exercised end to end in tests/e2e/test_cli.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import typer

from herald_cli import commands as cli


def _event(status: str, sent: int) -> bytes:
    campaign = {"id": "c1", "status": status,
                "counts": {"targeted": 1000, "sent": sent, "failed": 0, "unsent": 0}}
    return b"event: campaign\nid: 1\ndata: " + orjson.dumps(campaign) + b"\n\n"


class _Stream(httpx.SyncByteStream):
    """A response body sent piece by piece; ``then`` is raised after the last piece."""

    def __init__(self, pieces: list[bytes], then: Exception | None = None) -> None:
        self._pieces, self._then = pieces, then

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces
        if self._then is not None:
            raise self._then


def _target(answers: list[Callable[[], httpx.Response]]) -> tuple[cli.Endpoint, list[str]]:
    """A target whose successive requests get ``answers``; and the paths it was asked for."""
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return answers[len(asked) - 1]()
    return cli.Endpoint("http://herald.test", "key", httpx.MockTransport(handle)), asked


def _sse(pieces: list[bytes], then: Exception | None = None) -> Callable[[], httpx.Response]:
    return lambda: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=_Stream(pieces, then))


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "SSE_RECONNECT_S", 0.0)


def _statuses(states: Iterator[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(state["status"], state["counts"]["sent"]) for state in states]


def test_events_are_parsed_as_the_format_says() -> None:
    lines = [": keep-alive", "", "event: campaign", "data: {\"a\":", "data: 1}", "",
             "data:plain", "", "event: other", ""]
    assert list(cli.server_sent_events(lines)) == [
        ("campaign", "{\"a\":\n1}"), ("message", "plain")]


def test_watch_ends_at_the_final_status() -> None:
    target, asked = _target([_sse([_event("in_progress", 0), _event("in_progress", 500),
                                   _event("completed", 1000), _event("completed", 1000)])])
    states = _statuses(cli.campaign_states(target, "c1"))
    assert states == [("in_progress", 0), ("in_progress", 500), ("completed", 1000)]
    assert asked == ["/v1/campaigns/c1/events"]


def test_a_dropped_stream_is_reopened_and_followed_to_the_end() -> None:
    target, asked = _target([
        _sse([_event("in_progress", 200)], then=httpx.RemoteProtocolError("peer closed")),
        lambda: httpx.Response(503, json={"error": {"code": "unavailable", "message": "restart"}}),
        _sse([_event("in_progress", 700)]),  # ended cleanly but not final: an api restart
        _sse([_event("cancelling", 800), _event("cancelled", 800)]),
    ])
    states = _statuses(cli.campaign_states(target, "c1"))
    assert states == [("in_progress", 200), ("in_progress", 700), ("cancelling", 800),
                      ("cancelled", 800)]
    assert len(asked) == 4


def test_an_error_answer_ends_the_command() -> None:
    target, asked = _target([lambda: httpx.Response(404, json={"error": {
        "code": "campaign_not_found", "message": "no campaign c1"}})])
    with pytest.raises(typer.Exit):
        list(cli.campaign_states(target, "c1"))
    assert len(asked) == 1


def test_an_api_gone_for_good_ends_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "SSE_GIVE_UP_S", 0.0)
    refused = httpx.ConnectError("connection refused")

    def gone() -> httpx.Response:
        raise refused
    target, asked = _target([gone, gone])
    with pytest.raises(typer.Exit):
        list(cli.campaign_states(target, "c1"))
    assert len(asked) == 1
