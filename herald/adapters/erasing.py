"""Erasing a person from records that list people one by one (a chunk's ``recipients``, a test
send's ``outcomes``): each entry of theirs is replaced in place by a placeholder, so that
positions, and every count made from them, stay as they were.

A document is rewritten conditionally on its ``erased`` count (how many entries were replaced
so far), so two erasures of one document at once never undo each other: the one that loses
reads the document again and replaces its entries in what the other wrote.
"""

from __future__ import annotations

from collections.abc import Callable

from pymongo.asynchronous.collection import AsyncCollection

from herald.adapters.mongo import Document
from herald.domain.erasure import ErasedPerson


def _holding(person: ErasedPerson, field: str) -> Document:
    """The documents whose array ``field`` holds an entry of ``person``'s: one equality per
    token, device id and the user id (a person has a few devices). Not ``$in``: on nx-27017 an
    ``$in`` on a path into an array of subdocuments matches nothing (MongoDB matches)."""
    held: list[Document] = [{f"{field}.{key}": value}
                            for key, values in (("token", person.tokens),
                                                ("device_id", person.device_ids))
                            for value in sorted(values)]
    if person.user_id is not None:
        held.append({f"{field}.user_id": person.user_id})
    return {"$or": held} if held else {"_id": {"$exists": False}}


Replace = Callable[[Document], Document]
"""The placeholder of one entry (it may keep what is not personal: an FCM answer)."""
Rewrite = Callable[[Document, ErasedPerson], tuple[int, Document]]
"""How many of a person's entries a document holds, and the ``$set`` that erases them."""


async def erase_entries(collection: AsyncCollection[Document], field: str, person: ErasedPerson,
                        placeholder: Replace) -> int:
    """Replace ``person``'s entries of the array ``field`` in every document of
    ``collection`` that holds one; how many entries were replaced."""
    def rewrite(document: Document, person: ErasedPerson) -> tuple[int, Document]:
        entries = document.get(field) or []
        count = sum(person.owns(entry) for entry in entries)
        return count, {field: [placeholder(entry) if person.owns(entry) else entry
                               for entry in entries]}

    return await erase_where(collection, _holding(person, field), {field: 1}, person, rewrite)


async def erase_where(collection: AsyncCollection[Document], query: Document,
                      projection: Document, person: ErasedPerson, rewrite: Rewrite) -> int:
    """Erase ``person`` from every document of ``collection`` that ``query`` finds, each
    rewritten as ``rewrite`` says (it reads the fields of ``projection``); how many entries
    were replaced."""
    erased = 0
    async for document in collection.find(query, {**projection, "erased": 1}):
        erased += await _erase_in(collection, projection, document, person, rewrite)
    return erased


async def _erase_in(collection: AsyncCollection[Document], projection: Document,
                    document: Document | None, person: ErasedPerson, rewrite: Rewrite) -> int:
    while document is not None:
        count, replaced = rewrite(document, person)
        if not count:
            return 0
        result = await collection.update_one(
            {"_id": document["_id"], "erased": document.get("erased")},
            {"$set": replaced, "$inc": {"erased": count}})
        if result.modified_count == 1:
            return count
        document = await collection.find_one({"_id": document["_id"]},
                                             {**projection, "erased": 1})
    return 0
