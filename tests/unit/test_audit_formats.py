"""The audit's download formats (``services/api/audit.py``): exact values, quoted where CSV
needs it, the format chosen by parameter or by ``Accept``."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator

import orjson

from herald.domain.documents import Outcome
from herald.service_layer.recipients import RecipientLine
from services.api.audit import LINES_PER_WRITE, AuditFormat, audit_format, encoded

LINES = [RecipientLine("tok-1", 'ann, "the" boss', Outcome.FAILED, "UNREGISTERED"),
         RecipientLine("tok-2", None, Outcome.FAILED, None),
         RecipientLine("tok-3", "=1+1", Outcome.FAILED, None)]


async def lines(items: list[RecipientLine]) -> AsyncIterator[RecipientLine]:
    for item in items:
        yield item


async def download(items: list[RecipientLine], fmt: AuditFormat,
                   tokens_shown: bool = True) -> tuple[bytes, int]:
    blocks = [block async for block in encoded(lines(items), fmt, tokens_shown=tokens_shown)]
    return b"".join(blocks), len(blocks)


async def test_csv_keeps_every_value_quoting_what_needs_it_and_neutralising_formulas() -> None:
    content, _ = await download(LINES, AuditFormat.CSV)
    rows = list(csv.reader(io.StringIO(content.decode(), newline="")))
    assert rows == [["token", "user_id", "outcome", "error", "variant", "rule"],
                    ["tok-1", 'ann, "the" boss', "failed", "UNREGISTERED", "default", ""],
                    ["tok-2", "", "failed", "", "default", ""],
                    ["tok-3", "'=1+1", "failed", "", "default", ""]]


async def test_ndjson_is_one_object_per_line_written_in_blocks() -> None:
    many = [RecipientLine(f"tok-{i}", None, Outcome.UNSENT) for i in range(LINES_PER_WRITE + 1)]
    content, blocks = await download(many, AuditFormat.NDJSON)
    parsed = [orjson.loads(line) for line in content.splitlines()]
    assert blocks == 2 and len(parsed) == LINES_PER_WRITE + 1
    assert parsed[0] == {"token": "tok-0", "user_id": None, "outcome": "unsent", "error": None,
                         "variant": "default", "rule": None}


async def test_an_empty_csv_audit_is_its_header() -> None:
    assert await download([], AuditFormat.CSV) == (
        b"token,user_id,outcome,error,variant,rule\r\n", 1)


def test_the_parameter_wins_over_accept_and_ndjson_is_the_default() -> None:
    assert audit_format(None, "text/csv, */*") is AuditFormat.CSV
    assert audit_format(AuditFormat.NDJSON, "text/csv") is AuditFormat.NDJSON
    assert audit_format(None, "*/*") is AuditFormat.NDJSON
    assert audit_format(None, None) is AuditFormat.NDJSON


async def test_tokens_are_masked_for_a_key_that_may_not_read_devices() -> None:
    token = "fcm-" + "x" * 150 + "a1b2c3d4"
    masked = [RecipientLine(token, "ann", Outcome.SENT), RecipientLine("short", None, Outcome.SENT)]
    content, _ = await download(masked, AuditFormat.NDJSON, tokens_shown=False)
    assert [orjson.loads(line)["token"] for line in content.splitlines()] == ["…a1b2c3d4", "…rt"]
    csv_content, _ = await download(masked, AuditFormat.CSV, tokens_shown=False)
    assert token not in csv_content.decode() and "…a1b2c3d4,ann,sent" in csv_content.decode()
