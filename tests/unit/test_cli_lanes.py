"""``herald``'s lane options and what it prints of a campaign's lane (issue 29, point 3), against
an in-process fake of the API's transport (the real API: tests/e2e/test_cli.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.cli_fake import FakeApi, invoker

CAMPAIGN = {"id": "a" * 24, "status": "in_progress", "lane": "urgent", "name": "outage",
            "counts": {"targeted": 1000, "sent": 250, "failed": 3, "unsent": 747}}


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    return invoker(monkeypatch)


def test_create_sends_the_lane_and_the_cap_it_is_given(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    result = run(fake, "campaigns", "create", "--title", "Down", "--body", "We know",
                 "--lane", "urgent", "--rate-per-s", "500")
    assert result.exit_code == 0, result.output
    assert fake.body() == {"title": "Down", "body": "We know", "data": {}, "lane": "urgent",
                           "rate_per_s": 500}
    assert "b" * 24 in result.stdout


def test_create_without_a_lane_leaves_it_to_the_api(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    assert run(fake, "campaigns", "create", "--title", "T", "--body", "B").exit_code == 0
    assert "lane" not in fake.body()


def test_a_lane_that_does_not_exist_is_refused_before_any_call(run: Any) -> None:
    fake = FakeApi({})
    result = run(fake, "campaigns", "create", "--title", "T", "--body", "B", "--lane", "vip")
    assert result.exit_code == 2 and fake.requests == []


@pytest.mark.parametrize("action", ["retarget", "amend", "correct"])
def test_a_follow_up_takes_a_lane_or_keeps_the_originals(run: Any, action: str) -> None:
    fake = FakeApi({"id": "c" * 24, "status": "pending", "retarget": None, "amend": None})
    assert run(fake, "campaigns", action, "a" * 24, "--lane", "bulk").exit_code == 0
    assert fake.body() == {"lane": "bulk"}
    assert run(fake, "campaigns", action, "a" * 24).exit_code == 0
    assert fake.body() == {}


def test_list_shows_each_campaigns_lane(run: Any) -> None:
    fake = FakeApi({"items": [CAMPAIGN, {**CAMPAIGN, "id": "d" * 24, "lane": "bulk"}],
                    "next_cursor": None})
    result = run(fake, "campaigns", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["a" * 24, "in_progress", "urgent"]
    assert lines[1].split()[:3] == ["d" * 24, "in_progress", "bulk"]
