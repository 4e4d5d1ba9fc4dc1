"""The audit as a download: NDJSON (one JSON object per line) or CSV (a header row, then one row
per recipient), written in blocks so that a 50,000-line audit streams without being held whole.

Values are written exactly as recorded, so the file is the audit token for token; a spreadsheet
may read a ``user_id`` that starts with ``=`` as a formula (the README says so).
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Callable
from enum import StrEnum

import orjson

from herald.domain.documents import Outcome
from herald.service_layer.recipients import RecipientLine

LINES_PER_WRITE = 500
COLUMNS = ("token", "user_id", "outcome", "error")


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


def encoded(lines: AsyncIterator[RecipientLine], fmt: AuditFormat) -> AsyncIterator[bytes]:
    return _blocks(lines, _csv_block if fmt is AuditFormat.CSV else _ndjson_block,
                   _csv_header() if fmt is AuditFormat.CSV else b"")


async def _blocks(lines: AsyncIterator[RecipientLine],
                  encode: Callable[[list[RecipientLine]], bytes], header: bytes
                  ) -> AsyncIterator[bytes]:
    if header:
        yield header
    block: list[RecipientLine] = []
    async for line in lines:
        block.append(line)
        if len(block) >= LINES_PER_WRITE:
            yield encode(block)
            block = []
    if block:
        yield encode(block)


def _ndjson_block(block: list[RecipientLine]) -> bytes:
    return b"".join(orjson.dumps(line.as_dict()) + b"\n" for line in block)


def _csv_header() -> bytes:
    return _csv_rows([COLUMNS])


def _csv_block(block: list[RecipientLine]) -> bytes:
    return _csv_rows([(line.token, line.user_id or "", line.outcome.value, line.error or "")
                      for line in block])


def _csv_rows(rows: list[tuple[str, ...]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode()
