"""Run the nx-27017 MongoDB wire server with corrections (development and tests only).

1. nx-27017 0.8.1 binds scalar ``$set`` values as raw SQLite parameters, so a datetime written
   by an update comes back as a naive string ("2026-11-21 06:16:35.641000") and a boolean as
   0/1, while the same values written by an insert keep their types. The launcher routes those
   two types through nx-27017's own JSON encoding (its path for binary values).
2. It compares dates with SQLite's ``datetime()``, which keeps whole seconds only: a lease
   expiring at 12:00:00.300 is not "before" 12:00:00.900, and a campaign due at 12:00:00.900 is
   "due" at 12:00:00.000. The launcher overrides the one-argument ``datetime()`` on nx-27017's
   SQLite connections with a function that keeps microseconds (and reads any UTC offset).

3. An equality on a string keeps its index only if the field is the last key of an index: on any
   other field nx-27017 adds MongoDB's "or an array holding it" arm (``OR EXISTS (... json_each
   ...)``), which SQLite cannot serve from an index. So the senders' lookup of a chunk's recorded
   outcomes (``{campaign_id, seq}`` on the ``campaign_seq`` index of ``deliveries``) scanned every
   delivery of every campaign: 39.6 ms at 22,500 deliveries, 98.2 ms at 55,500 (issue 33). The
   launcher counts every key of every index as indexed (nx-27017's own rule, which read the keys
   from the index's name and so saw only its last one). Herald's indexed fields hold scalars only.
4. It evaluates a range on ``_id`` (``{"_id": {"$gt": ObjectId(...)}}``) in Python over the
   whole collection, in ``find`` and in ``count``/``$count`` alike: one page of 5,000 devices
   after a position took 5.1 s at 200,000 devices, and a count of the devices after it 2.1 s
   (2026-11-28), while its single thread served nobody else. An ObjectId range is a range of the
   24-character hex strings it stores in its indexed ``_id`` column, in the same order, so the
   launcher hands such a range to SQLite (0.09 s and 0.24 s); any other ``_id`` range is left to
   nx-27017. It also converts the driver's ObjectIds in an aggregation pipeline to its own, as
   it does for ``find`` (a ``$match`` on an ``_id`` range then ``$group`` counted 0).

And one change of cost, not of behaviour: nx-27017 writes each document of an ``insert`` command
in a SQLite transaction of its own (a commit, with its journal sync, per document); the launcher
runs a command's documents in one transaction, each still inserted alone, so a duplicate key
still fails only its own document (MongoDB's ``writeErrors``; ``ordered`` stops there, unordered
goes on) and the others are committed together. ``bench.nx_insert`` measured the storage's cost
(2.2x less CPU per document, 2026-11-27); a command inside a client transaction is left as it was.

MongoDB does none of the four; Herald relies on all (timestamps and flags are updated all the
time, leases and schedules are compared to the millisecond, the per-chunk lookup must not grow
with the collection, and audiences are paged and counted by ``_id`` range). Production code is
unchanged; ``tests/integration/test_nx_gaps.py`` pins the behaviour.

    python -m devstack.nx_server --data-dir DIR -p PORT --pid-file F --log-file F
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from neosqlite._sqlite import sqlite3
from neosqlite.binary import Binary
from neosqlite.collection import Collection, sql_translator_unified
from neosqlite.collection.index_manager import _load_index_keys
from neosqlite.collection.query_helper import _sql_updates
from neosqlite.collection.query_helper._sql_query_builder import SqlQueryBuilderMixin
from neosqlite.objectid import ObjectId as StoredObjectId
from nx_27017.handler import NeoSQLiteHandler, _serialize
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

_original_field_has_index = SqlQueryBuilderMixin._field_has_index


def _field_has_index(self: Any, field: str) -> bool:
    """Whether ``field`` is any key of an index of the collection (nx-27017 asks whether an
    index's name ends with it, which misses the first keys of a compound index)."""
    if _original_field_has_index(self, field):
        return True
    try:
        names = self.collection.list_indexes()
    except Exception:  # nx-27017's own check gives up the same way
        return False
    return any(field in (_load_index_keys(self.collection.db, name) or ())
               for name in names if isinstance(name, str))


SqlQueryBuilderMixin._field_has_index = _field_has_index

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


_find_id_clause = SqlQueryBuilderMixin._build_id_operator_clause


def _id_clause(self: Any, value: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """``find``'s WHERE for an operator on ``_id``."""
    return _object_id_range(self._id_column_ref(), value) or _find_id_clause(self, value)


SqlQueryBuilderMixin._build_id_operator_clause = _id_clause

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

_insert_alone = NeoSQLiteHandler.handle_insert.__wrapped__  # the handler without its lock


@_serialize  # type: ignore[untyped-decorator]  # nx-27017's own lock, as its insert takes it
def _insert_in_one_transaction(self: Any, msg: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = next((doc for kind, doc in msg["sections"] if kind == "body"), {})
    connection = self.get_database(body.get("$db", "test")).db
    if body.get("autocommit") is False or connection.in_transaction:  # a client transaction
        return _insert_alone(self, msg)  # type: ignore[no-any-return]
    connection.execute("BEGIN")
    try:
        answer = _insert_alone(self, msg)
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
    return answer  # type: ignore[no-any-return]


NeoSQLiteHandler.handle_insert = _insert_in_one_transaction

if __name__ == "__main__":
    main()
