"""Run the nx-27017 MongoDB wire server with one correction applied (development and tests only).

nx-27017 0.8.1 binds scalar ``$set``/``$push`` values as raw SQLite parameters, so a datetime
written by an update comes back as a naive string ("2026-11-21 06:16:35.641000") and a boolean
as 0/1, while the same values written by an insert keep their types. MongoDB keeps them. Herald
updates timestamps and flags all the time, so the launcher routes those two types through
nx-27017's own JSON encoding (the path it already uses for binary values) before starting it.
Production code is unchanged; ``tests/integration/test_nx_gaps.py`` pins the behaviour.

    python -m devstack.nx_server --data-dir DIR -p PORT --pid-file F --log-file F
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from neosqlite.binary import Binary
from neosqlite.collection.query_helper import _sql_updates
from nx_27017.nx_27017 import main


class _JsonValue(Binary):
    """A value nx-27017 must store as JSON (it treats Binary values that way)."""

    _value: Any

    def __new__(cls, value: Any) -> _JsonValue:
        wrapped = super().__new__(cls, b"")
        wrapped._value = value
        return wrapped

    def encode_for_storage(self) -> Any:  # type: ignore[override]
        return self._value


_original_convert = _sql_updates._convert_bytes_to_binary


def _convert(value: Any) -> Any:
    if isinstance(value, datetime):
        return _JsonValue({"$date": value.isoformat()})
    if isinstance(value, bool):
        return _JsonValue(value)
    return _original_convert(value)


_sql_updates._convert_bytes_to_binary = _convert

if __name__ == "__main__":
    main()
