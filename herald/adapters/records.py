"""Herald's records to and from BSON: the one place where an ``ObjectId`` meets a string id.

A stored document is the record's fields as they are (nested records as subdocuments), with the
record's ``id`` as ``_id``: an ``ObjectId`` for campaigns, schedules and devices. References
between documents (a chunk's ``campaign_id``, a campaign's ``schedule_id``...) are hex strings,
because nx-27017 does not match an ``ObjectId`` in any field but ``_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from bson import ObjectId
from bson.errors import InvalidId
from pydantic import TypeAdapter

from herald.domain.access import ApiKey, LogEntry
from herald.domain.documents import (
    Campaign,
    ChunkState,
    Delivery,
    Device,
    IdempotencyBinding,
    Schedule,
    TestSend,
)

Document = dict[str, Any]
Record = TypeVar("Record")

_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {
    kind: TypeAdapter(kind)
    for kind in (ApiKey, Campaign, ChunkState, Delivery, Device, IdempotencyBinding, LogEntry,
                 Schedule, TestSend)
}


def object_id(record_id: str) -> ObjectId | None:
    """The ``ObjectId`` behind an id from a URL or a message, or None when it is not one."""
    try:
        return ObjectId(record_id)
    except (InvalidId, TypeError):
        return None


def to_bson(record: object, *, object_id_key: bool = True) -> Document:
    """``record`` as a document; its ``id`` becomes ``_id`` (an ``ObjectId`` by default)."""
    document: Document = _ADAPTERS[type(record)].dump_python(record, by_alias=True)
    if "id" in document:
        record_id = document.pop("id")
        document["_id"] = ObjectId(record_id) if object_id_key else record_id
    return document


def from_bson(kind: type[Record], document: Mapping[str, Any]) -> Record:
    """The ``kind`` record stored as ``document`` (``_id`` read back as a string ``id``)."""
    fields = dict(document)
    if "_id" in fields:
        fields["id"] = str(fields.pop("_id"))
    record: Record = _ADAPTERS[kind].validate_python(fields)
    return record


def maybe(kind: type[Record], document: Mapping[str, Any] | None) -> Record | None:
    return None if document is None else from_bson(kind, document)
