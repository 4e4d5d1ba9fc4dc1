"""The body of a device import: NDJSON, one device per line (``POST /v1/devices/import``).

Each line is what ``POST /v1/devices/bulk`` takes as one item of ``devices`` (``DeviceIn``),
validated the same way. The body is read as it arrives: :func:`device_lines` splits the byte
chunks into numbered lines and never holds more than one line, so a line longer than
:data:`MAX_LINE_BYTES` is refused by its number while its bytes are skipped, not kept.

A line that does not validate is reported by its number and the import goes on with the next:
a file of a million devices with a few broken lines imports the rest, and says exactly which
lines to fix (a re-import of the whole file is harmless: every line is idempotent per token).
Blank lines (a trailing newline, an empty line between) are skipped without a count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic import ValidationError

from herald.contracts.http import DeviceIn
from herald.domain.device_import import DeviceFields, LineProblem

NDJSON_MEDIA_TYPE = "application/x-ndjson"
MAX_LINE_BYTES = 512 * 1024
"""The longest line taken. The largest valid device is about 150 KB of JSON (a 4,096-character
token, 100 topics of 900 characters, 50 attributes of 1,024); a longer line is not a device."""


@dataclass(frozen=True, slots=True)
class DeviceLine:
    """A valid line: its number and the device's fields (JSON types, ``token`` included)."""

    line: int
    fields: DeviceFields


def parse_device_line(number: int, raw: bytes) -> DeviceLine | LineProblem:
    """Line ``number`` read as one device, or why it is not one."""
    try:
        device = DeviceIn.model_validate_json(raw)
    except ValidationError as exc:
        return LineProblem(number, "invalid_device", _first_error(exc))
    return DeviceLine(number, device.model_dump(mode="json"))


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


class LineSplitter:
    """Byte chunks in, complete numbered lines out; a line over ``max_line_bytes`` comes out
    as ``None`` (its bytes dropped as they arrive) with its length."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._pending = bytearray()
        self._skipped = 0  # > 0: inside a line already too long, this many bytes so far
        self._number = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes | None, int]]:
        """The lines ``chunk`` completes: (number, bytes or None if too long, length)."""
        lines: list[tuple[int, bytes | None, int]] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lines.append(self._complete(chunk[start:end]))
            start = end + 1
        self._keep(chunk[start:])
        return lines

    def finish(self) -> list[tuple[int, bytes | None, int]]:
        """The last line, if the body did not end with a newline."""
        if self._pending or self._skipped:
            return [self._complete(b"")]
        return []

    def _complete(self, tail: bytes) -> tuple[int, bytes | None, int]:
        self._number += 1
        if self._skipped or len(self._pending) + len(tail) > self._max:
            length = self._skipped + len(self._pending) + len(tail)
            self._pending.clear()
            self._skipped = 0
            return self._number, None, length
        line = bytes(self._pending) + tail if self._pending else tail
        self._pending.clear()
        return self._number, line, len(line)

    def _keep(self, rest: bytes) -> None:
        if self._skipped:
            self._skipped += len(rest)
        elif len(self._pending) + len(rest) > self._max:
            self._skipped = len(self._pending) + len(rest)
            self._pending.clear()
        else:
            self._pending += rest


def read_line(number: int, raw: bytes | None, length: int,
              max_line_bytes: int = MAX_LINE_BYTES) -> DeviceLine | LineProblem | None:
    """One split line as a device, a problem, or None for a blank line (skipped)."""
    if raw is None:
        return LineProblem(number, "line_too_long",
                           f"{length:,} bytes, over the {max_line_bytes:,} a device line may "
                           f"have (is the body NDJSON, one device per line?)")
    if not raw.strip():
        return None
    return parse_device_line(number, raw)


async def device_lines(chunks: AsyncIterator[bytes], max_line_bytes: int = MAX_LINE_BYTES
                       ) -> AsyncIterator[DeviceLine | LineProblem]:
    """Every non-blank line of an NDJSON body, in order, as it arrives."""
    splitter = LineSplitter(max_line_bytes)
    async for chunk in chunks:
        for number, raw, length in splitter.feed(chunk):
            if (read := read_line(number, raw, length, max_line_bytes)) is not None:
                yield read
    for number, raw, length in splitter.finish():
        if (read := read_line(number, raw, length, max_line_bytes)) is not None:
            yield read
