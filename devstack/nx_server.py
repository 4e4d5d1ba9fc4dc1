"""Run the nx-27017 MongoDB wire server with three corrections (development and tests only).

1. nx-27017 0.8.1 binds scalar ``$set`` values as raw SQLite parameters, so a datetime written
   by an update comes back as a naive string ("2026-11-21 06:16:35.641000") and a boolean as
   0/1, while the same values written by an insert keep their types. The launcher routes those
   two types through nx-27017's own JSON encoding (its path for binary values).
2. It compares dates with SQLite's ``datetime()``, which keeps whole seconds only: a lease
   expiring at 12:00:00.300 is not "before" 12:00:00.900, and a campaign due at 12:00:00.900 is
   "due" at 12:00:00.000. The launcher overrides the one-argument ``datetime()`` on nx-27017's
   SQLite connections with a function that keeps microseconds (and reads any UTC offset).
3. It evaluates a range on ``_id`` (``{"_id": {"$gt": ObjectId(...)}}``) in Python over the
   whole collection, in ``find`` and in ``count``/``$count`` alike: one page of 5,000 devices
   after a position took 5.1 s at 200,000 devices, and a count of the devices after it 2.1 s
   (2026-11-28), while its single thread served nobody else. An ObjectId range is a range of the
   24-character hex strings it stores in its indexed ``_id`` column, in the same order, so the
   launcher hands such a range to SQLite (0.09 s and 0.24 s); any other ``_id`` range is left to
   nx-27017. It also converts the driver's ObjectIds in an aggregation pipeline to its own, as
   it does for ``find`` (a ``$match`` on an ``_id`` range then ``$group`` counted 0).

MongoDB does none of these; Herald relies on all three (timestamps and flags are updated all the
time, leases and schedules are compared to the millisecond, audiences are paged by ``_id`` range).
Production code is unchanged;
``tests/integration/test_nx_gaps.py`` pins the behaviour.

    python -m devstack.nx_server --data-dir DIR -p PORT --pid-file F --log-file F
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from neosqlite._sqlite import sqlite3
from neosqlite.binary import Binary
from neosqlite.collection import Collection, sql_translator_unified
from neosqlite.collection.query_helper import _sql_query_builder, _sql_updates
from neosqlite.objectid import ObjectId as StoredObjectId
from nx_27017.nx_27017 import main
from nx_27017.utils import convert_bson_to_neo_objectids

JULIAN_UNIX_EPOCH = 2440587.5


class _JsonValue(Binary):  # type: ignore[misc]  # neosqlite ships no type information
    """A value nx-27017 must store as JSON (it treats Binary values that way)."""

    _value: Any

    def __new__(cls, value: Any) -> _JsonValue:
        wrapped: _JsonValue = super().__new__(cls, b"")
        wrapped._value = value
        return wrapped

    def encode_for_storage(self) -> Any:
        return self._value


_original_convert = _sql_updates._convert_bytes_to_binary


def _convert(value: Any) -> Any:
    if isinstance(value, datetime):
        return _JsonValue({"$date": value.isoformat()})
    if isinstance(value, bool):
        return _JsonValue(value)
    return _original_convert(value)


_sql_updates._convert_bytes_to_binary = _convert


def _instant(value: Any) -> str | None:
    """SQLite's ``datetime(x)`` with microseconds: UTC, 'YYYY-MM-DD HH:MM:SS.ffffff'."""
    if isinstance(value, str):
        if value == "now":
            moment = datetime.now(UTC)
        else:
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return None
    elif isinstance(value, int | float):  # SQLite reads a bare number as a Julian day
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=value - JULIAN_UNIX_EPOCH)
    else:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


_original_connect = sqlite3.connect


def _connect(*args: Any, **kwargs: Any) -> Any:
    connection = _original_connect(*args, **kwargs)
    connection.create_function("datetime", 1, _instant, deterministic=True)
    return connection


sqlite3.connect = _connect

_SQL_RANGE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _object_id_range(column: str, conditions: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """``column`` within an ObjectId range, as SQL over its stored hex strings (None: not a
    range of ObjectIds only). ``typeof`` keeps numbers out, as MongoDB compares within a type."""
    if not conditions or not all(op in _SQL_RANGE and isinstance(value, ObjectId | StoredObjectId)
                                 for op, value in conditions.items()):
        return None
    clauses = [f"typeof({column}) = 'text'"]
    clauses += [f"{column} {_SQL_RANGE[op]} ?" for op in conditions]
    return "(" + " AND ".join(clauses) + ")", [str(value) for value in conditions.values()]


_find_id_clause = _sql_query_builder.SqlQueryBuilderMixin._build_id_operator_clause


def _id_clause(self: Any, value: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """``find``'s WHERE for an operator on ``_id``."""
    return _object_id_range(self._id_column_ref(), value) or _find_id_clause(self, value)


_sql_query_builder.SqlQueryBuilderMixin._build_id_operator_clause = _id_clause

_match_operator = sql_translator_unified.SQLOperatorTranslator.translate_operator


def _operator(self: Any, field_access: str, operator: str, value: Any) -> tuple[str | None,
                                                                                list[Any]]:
    """``count`` and ``$match``'s SQL for one operator."""
    if field_access == "_id" and (found := _object_id_range("_id", {operator: value})):
        return found
    result: tuple[str | None, list[Any]] = _match_operator(self, field_access, operator, value)
    return result


sql_translator_unified.SQLOperatorTranslator.translate_operator = _operator

_aggregate = Collection.aggregate


def _aggregate_stored_ids(self: Any, pipeline: list[Any], *args: Any, **kwargs: Any) -> Any:
    """nx-27017 hands a pipeline over with the driver's ObjectIds, which its own never equal
    (``find`` and ``count`` convert them first): an ``_id`` range in a ``$match`` counted 0."""
    return _aggregate(self, convert_bson_to_neo_objectids(pipeline), *args, **kwargs)


Collection.aggregate = _aggregate_stored_ids

if __name__ == "__main__":
    main()
