"""``herald devices import`` (issue 33, point 5) against an in-process fake of the API's
transport: the file goes as it is, declared NDJSON with its length; progress on stderr, the
counts and each invalid line on stdout; exit 2 when some lines were invalid."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from herald_cli import commands as cli

ANSWER = {"lines": 3, "inserted": 2, "updated": 0, "unchanged": 0, "invalid": 1,
          "problems": [{"line": 2, "code": "invalid_device",
                        "message": "platform: Input should be 'android', 'ios' or 'web'"}],
          "problems_omitted": 0}


class ImportApi:
    def __init__(self, answer: dict[str, Any], status: int = 200) -> None:
        self.answer, self.status = answer, status
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return httpx.Response(self.status, json=self.answer)


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    def invoke(fake: ImportApi, *args: str) -> Any:
        monkeypatch.setattr(cli, "Endpoint", functools.partial(
            cli.Endpoint, transport=httpx.MockTransport(fake.handle)))
        return CliRunner().invoke(cli.app, list(args), catch_exceptions=False)
    return invoke


def test_the_file_is_sent_whole_as_ndjson_and_its_counts_printed(run: Any, tmp_path: Path) -> None:
    body = b'{"token": "a", "platform": "ios"}\n{"token": "b"}\n{"token": "c", "platform": "web"}\n'
    (tmp_path / "d.ndjson").write_bytes(body)
    fake = ImportApi(ANSWER)
    result = run(fake, "devices", "import", str(tmp_path / "d.ndjson"))
    (request,) = fake.requests
    assert (request.method, request.url.path) == ("POST", "/v1/devices/import")
    assert request.headers["Content-Type"] == "application/x-ndjson"
    assert request.headers["Content-Length"] == str(len(body))
    assert request.content == body
    assert result.exit_code == cli.SOME_INVALID
    assert result.stdout.splitlines() == [
        "3 lines: 2 inserted, 0 updated, 0 unchanged, 1 invalid",
        "line 2: invalid_device: platform: Input should be 'android', 'ios' or 'web'"]
    assert result.stderr.splitlines()[-1].startswith("sent 3 lines (100%), ")


def test_a_clean_import_exits_0(run: Any, tmp_path: Path) -> None:
    (tmp_path / "d.ndjson").write_bytes(b'{"token": "a", "platform": "ios"}\n')
    answer = {**ANSWER, "lines": 1, "inserted": 0, "unchanged": 1, "invalid": 0, "problems": []}
    result = run(ImportApi(answer), "devices", "import", str(tmp_path / "d.ndjson"))
    assert result.exit_code == 0
    assert result.stdout == "1 line: 0 inserted, 0 updated, 1 unchanged, 0 invalid\n"


def test_a_refusal_is_told_with_its_code_and_exits_1(run: Any, tmp_path: Path) -> None:
    (tmp_path / "d.ndjson").write_bytes(b"{}\n")
    refused = ImportApi({"error": {"code": "forbidden", "message": "the key 'v' (viewer) lacks "
                                                                   "devices:write"}}, 403)
    result = run(refused, "devices", "import", str(tmp_path / "d.ndjson"))
    assert result.exit_code == 1
    assert "lacks devices:write (forbidden, HTTP 403)" in result.stderr


def test_a_missing_file_is_told_before_any_call(run: Any, tmp_path: Path) -> None:
    fake = ImportApi(ANSWER)
    result = run(fake, "devices", "import", str(tmp_path / "nope.ndjson"))
    assert result.exit_code == 1
    assert "cannot read" in result.stderr
    assert fake.requests == []
