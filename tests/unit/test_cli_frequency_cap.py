"""``herald``'s frequency cap options and what it prints of suppressed recipients (issue 32,
point 2), against an in-process fake of the API's transport."""

from __future__ import annotations

from typing import Any

import pytest

from herald_cli import commands as cli
from tests.unit.cli_fake import FakeApi, invoker

FINISHED = {"id": "a" * 24, "status": "completed", "lane": "standard", "purpose": "marketing",
            "name": "sale", "counts": {"targeted": 1000, "sent": 600, "failed": 0, "unsent": 0,
                                       "suppressed": 400}}


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    return invoker(monkeypatch)


def test_create_sends_the_campaigns_own_cap(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    result = run(fake, "campaigns", "create", "--title", "Sale", "--body", "Today",
                 "--frequency-cap", "none")
    assert result.exit_code == 0, result.output
    assert fake.body()["frequency_cap"] == "none"


def test_create_without_a_cap_leaves_it_to_the_setting(run: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    assert run(fake, "campaigns", "create", "--title", "T", "--body", "B").exit_code == 0
    assert "frequency_cap" not in fake.body() and "quiet_hours" not in fake.body()


@pytest.mark.parametrize(("choice", "sent"), [
    ("skip", "skip"), ("off", "off"), ("22:00-07:00", {"window": "22:00-07:00", "mode": "hold"}),
    ("22:00-07:00/skip", {"window": "22:00-07:00", "mode": "skip"})])
def test_create_sends_the_campaigns_quiet_hours(run: Any, choice: str, sent: Any) -> None:
    fake = FakeApi({"id": "b" * 24, "status": "pending"}, status=202)
    result = run(fake, "campaigns", "create", "--title", "Sale", "--body", "Today",
                 "--quiet-hours", choice)
    assert result.exit_code == 0, result.output
    assert fake.body()["quiet_hours"] == sent


@pytest.mark.parametrize("action", ["retarget", "correct"])
def test_a_follow_up_asks_for_the_suppressed_only_when_told(run: Any, action: str) -> None:
    fake = FakeApi({"id": "c" * 24, "status": "pending", "retarget": None, "amend": None},
                   status=202)
    assert run(fake, "campaigns", action, "a" * 24).exit_code == 0
    assert fake.body() == {}
    assert run(fake, "campaigns", action, "a" * 24, "--include-suppressed",
               "--frequency-cap", "none").exit_code == 0
    assert fake.body() == {"include_suppressed": True, "frequency_cap": "none"}


def test_watch_prints_the_suppressed_beside_the_other_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    cli._progress_lines(iter([FINISHED]))
    cli._print_final(FINISHED)
    cli._print_final({**FINISHED, "counts": {**FINISHED["counts"], "suppressed": 0}})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["completed", "sent", "600", "failed", "0", "unsent", "0",
                                "suppressed", "400", "of", "1000"]
    assert lines[1] == "completed: sent 600, failed 0, unsent 0, suppressed 400 of 1000 targeted"
    assert lines[2] == "completed: sent 600, failed 0, unsent 0 of 1000 targeted"


def test_list_prints_the_suppressed_only_when_there_are_some(run: Any) -> None:
    fake = FakeApi({"items": [FINISHED, {**FINISHED, "id": "d" * 24,
                                         "counts": {**FINISHED["counts"], "suppressed": 0}}],
                    "next_cursor": None})
    result = run(fake, "campaigns", "list")
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert "failed      0  suppressed 400  of     1000" in first
    assert "failed      0  of     1000" in second
