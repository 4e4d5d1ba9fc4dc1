"""``herald``'s purpose options and what it prints of a campaign's purpose (issue 32, point 1),
against an in-process fake of the API's transport."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.cli_fake import FakeApi, invoker

CAMPAIGN = {"id": "a" * 24, "status": "in_progress", "lane": "urgent", "name": "outage",
            "counts": {"targeted": 1000, "sent": 250, "failed": 3, "unsent": 747}}


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    return invoker(monkeypatch)


def test_create_sends_the_purpose_it_is_given(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    result = run(fake, "campaigns", "create", "--title", "Receipt", "--body", "Paid",
                 "--purpose", "transactional")
    assert result.exit_code == 0, result.output
    assert fake.body()["purpose"] == "transactional"
    assert "transactional" in result.stderr


def test_create_without_a_purpose_leaves_it_to_the_api(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    assert run(fake, "campaigns", "create", "--title", "T", "--body", "B").exit_code == 0
    assert "purpose" not in fake.body()


@pytest.mark.parametrize("action", ["retarget", "amend", "correct"])
def test_a_follow_up_takes_a_purpose_or_keeps_the_originals(
        run: Any, action: str) -> None:
    fake = FakeApi({"id": "c" * 24, "status": "pending", "retarget": None, "amend": None},
                   status=202)
    assert run(fake, "campaigns", action, "a" * 24, "--purpose", "marketing").exit_code == 0
    assert fake.body() == {"purpose": "marketing"}


def test_list_shows_each_campaigns_purpose_legacy_for_an_old_one(run: Any) -> None:
    fake = FakeApi({"items": [{**CAMPAIGN, "purpose": "transactional"},
                              {**CAMPAIGN, "id": "d" * 24, "purpose": None}],
                    "next_cursor": None})
    result = run(fake, "campaigns", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["a" * 24, "in_progress", "urgent", "transactional"]
    assert lines[1].split()[:4] == ["d" * 24, "in_progress", "urgent", "legacy"]


def test_estimate_sends_the_purpose(run: Any) -> None:
    fake = FakeApi({"devices": 3, "by_language": None, "finishes_in_s": 1.0,
                    "fleet_rate_per_s": 100.0, "fleet_rate_measured": False,
                    "recipients_ahead": 0})
    assert run(fake, "audiences", "estimate", "--purpose", "transactional").exit_code == 0
    assert fake.body()["purpose"] == "transactional"
