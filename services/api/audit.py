"""The audit as a download: NDJSON (one JSON object per line) or CSV (a header row, then one row
per recipient), written in blocks so that a 50,000-line audit streams without being held whole.

The NDJSON is the audit of record: every value exactly as recorded, token for token, for a key
that may read devices (``devices:read``: operator, admin); a key that may not (viewer, responder)
gets each token masked (``…`` and its last 8 characters: enough to tell recipients apart and to
match a line with a device one holds, of no use to send to). The CSV is
for people and their spreadsheets: a cell that a spreadsheet would read as a formula (it starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return: OWASP's list for CSV injection) is
written with a leading ``'``, which spreadsheets show as text and do not display. defusedcsv
(PyPI) does this for ``= + - @ | %`` but not for a tab or a carriage return, which the red team
used, and it rewrites ``|`` inside such cells; the rule is one line, kept here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from enum import StrEnum

import orjson

from herald.domain.access import masked_token
from herald.domain.documents import Outcome
from herald.service_layer.recipients import RecipientLine

LINES_PER_WRITE = 500
COLUMNS = ("token", "user_id", "outcome", "error", "variant", "rule")
"""``rule``: what held a ``suppressed`` recipient back (``frequency_cap``); empty otherwise."""


class AuditFormat(StrEnum):
    NDJSON = "ndjson"
    CSV = "csv"


MEDIA_TYPES = {AuditFormat.NDJSON: "application/x-ndjson", AuditFormat.CSV: "text/csv"}


def audit_format(requested: AuditFormat | None, accept: str | None) -> AuditFormat:
    """The format asked for: ``format=``, else ``Accept: text/csv``, else NDJSON."""
    if requested is not None:
        return requested
    return AuditFormat.CSV if accept and "text/csv" in accept else AuditFormat.NDJSON


def download_headers(campaign_id: str, outcome: Outcome, fmt: AuditFormat) -> dict[str, str]:
    filename = f"campaign-{campaign_id}-{outcome.value}.{fmt.value}"
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


def encoded(lines: AsyncIterator[RecipientLine], fmt: AuditFormat, *,
            tokens_shown: bool) -> AsyncIterator[bytes]:
    """The audit's lines as ``fmt``; their tokens masked unless ``tokens_shown``."""
    return _blocks(lines, _csv_block if fmt is AuditFormat.CSV else _ndjson_block,
                   _csv_header() if fmt is AuditFormat.CSV else b"", tokens_shown)


async def _blocks(lines: AsyncIterator[RecipientLine],
                  encode: Callable[[list[RecipientLine]], bytes], header: bytes,
                  tokens_shown: bool) -> AsyncIterator[bytes]:
    if header:
        yield header
    block: list[RecipientLine] = []
    async for line in lines:
        block.append(line if tokens_shown else replace(line, token=masked_token(line.token)))
        if len(block) >= LINES_PER_WRITE:
            yield encode(block)
            block = []
    if block:
        yield encode(block)


def _ndjson_block(block: list[RecipientLine]) -> bytes:
    return b"".join(orjson.dumps(line.as_dict()) + b"\n" for line in block)


def _csv_header() -> bytes:
    return _csv_rows([COLUMNS])


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralised(cell: str) -> str:
    """``cell`` as a spreadsheet will show it as text, never run it as a formula."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def _csv_block(block: list[RecipientLine]) -> bytes:
    return _csv_rows([(neutralised(line.token), neutralised(line.user_id or ""),
                       line.outcome.value, neutralised(line.error or ""), line.variant,
                       line.rule.value if line.rule else "")
                      for line in block])


def _csv_rows(rows: list[tuple[str, ...]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode()
