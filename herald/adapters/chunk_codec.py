"""A chunk's recipients as its document stores them: the one codec every reader goes through.

Since issue 33 a chunk stores its recipients as parallel arrays, one entry per position:
``t`` the tokens (``""``: an erased person's place), ``u`` the user ids (left out when no
recipient has one), ``p`` the profiles (left out unless the campaign's content reads them),
each profile with short keys and without its empty fields, and ``s`` the rule that suppresses a
recipient before any request (quiet hours that skip; left out when none does). An array of
subdocuments repeated ``token`` and ``user_id`` (and every profile key) in each of them; the
devices collection holds the rest of a device, and nothing else is kept.

A chunk written before (``recipients``: one subdocument per recipient) is still read as it was
written, and rewritten in its own format by an erasure: no migration is needed.
"""

from __future__ import annotations

from collections.abc import Sequence

from herald.adapters.mongo import Document
from herald.domain.erasure import ErasedPerson
from herald.domain.messages import Profile, Recipient
from herald.domain.suppression import Rule

TOKENS, USER_IDS, PROFILES, SUPPRESSED = "t", "u", "p", "s"
LEGACY = "recipients"
"""The array of subdocuments of chunks written before the parallel arrays."""
WITHOUT_RECIPIENTS: Document = {TOKENS: 0, USER_IDS: 0, PROFILES: 0, SUPPRESSED: 0, LEGACY: 0}
"""The projection of a chunk's state alone."""
RECIPIENT_FIELDS: Document = {TOKENS: 1, USER_IDS: 1, PROFILES: 1, SUPPRESSED: 1, LEGACY: 1}

ERASED_RECIPIENT = Recipient.erased_placeholder()
_PROFILE_KEYS = (("platform", "pl"), ("locale", "lo"), ("timezone", "tz"), ("attributes", "a"))


def encode(recipients: Sequence[Recipient]) -> Document:
    """The fields that hold ``recipients`` in a chunk document."""
    columns: Document = {TOKENS: [r.token for r in recipients]}
    if any(r.user_id is not None for r in recipients):
        columns[USER_IDS] = [r.user_id for r in recipients]
    if any(r.profile is not None for r in recipients):
        columns[PROFILES] = [_profile_stored(r.profile) for r in recipients]
    if any(r.suppressed is not None for r in recipients):
        columns[SUPPRESSED] = [None if r.suppressed is None else r.suppressed.value
                               for r in recipients]
    return columns


def decode(document: Document) -> tuple[Recipient, ...]:
    """The recipients a chunk document holds, in either format. Read without a validator:
    they were validated when the chunk was written, and the audit reads millions."""
    if LEGACY in document:
        return tuple(_legacy(stored) for stored in document[LEGACY])
    tokens: list[str] = document[TOKENS]
    user_ids = document.get(USER_IDS) or [None] * len(tokens)
    profiles = document.get(PROFILES) or [None] * len(tokens)
    marks = document.get(SUPPRESSED) or [None] * len(tokens)
    return tuple(_recipient(token, user_id, profile, mark) for token, user_id, profile, mark
                 in zip(tokens, user_ids, profiles, marks, strict=True))


def _recipient(token: str, user_id: str | None, profile: Document | None,
               mark: str | None) -> Recipient:
    if not token:
        return ERASED_RECIPIENT
    return Recipient.model_construct(token=token, user_id=user_id,
                                     profile=_profile_read(profile),
                                     suppressed=None if mark is None else Rule(mark))


def _profile_stored(profile: Profile | None) -> Document | None:
    if profile is None:
        return None
    return {short: value for name, short in _PROFILE_KEYS
            if (value := getattr(profile, name)) is not None and value != {}}


def _profile_read(stored: Document | None) -> Profile | None:
    if stored is None:
        return None
    return Profile.model_construct(**{"attributes": {}, **{
        name: stored[short] for name, short in _PROFILE_KEYS if short in stored}})


def _legacy(stored: Document) -> Recipient:
    if stored.get("erased"):
        return ERASED_RECIPIENT
    profile, mark = stored.get("profile"), stored.get("suppressed")
    return Recipient.model_construct(
        token=stored["token"], user_id=stored.get("user_id"),
        profile=None if profile is None else Profile.model_construct(
            **{"attributes": {}, **profile}),
        suppressed=None if mark is None else Rule(mark))


def holding(person: ErasedPerson) -> list[Document]:
    """Conditions (any of them) of the chunks that hold one of ``person``'s recipients, in
    either format: one equality per token and the user id, each matching an array that holds
    it (not ``$in``: see ``herald/adapters/erasing.py``)."""
    tokens = sorted(person.tokens)
    held: list[Document] = [{field: token} for token in tokens
                            for field in (TOKENS, f"{LEGACY}.token")]
    if person.user_id is not None:
        held += [{USER_IDS: person.user_id}, {f"{LEGACY}.user_id": person.user_id}]
    return held


def erased_in(document: Document, person: ErasedPerson) -> tuple[int, Document]:
    """How many of ``person``'s recipients ``document`` holds, and the ``$set`` that puts the
    erased placeholder in their places (in the document's own format)."""
    if LEGACY in document:
        entries: list[Document] = document[LEGACY]
        theirs = [person.owns(entry) for entry in entries]
        return sum(theirs), {LEGACY: [ERASED_RECIPIENT.stored() if mine else entry
                                      for entry, mine in zip(entries, theirs, strict=True)]}
    recipients = decode(document)
    theirs = [not r.erased and person.owns({"token": r.token, "user_id": r.user_id})
              for r in recipients]
    kept = [ERASED_RECIPIENT if mine else r for r, mine in zip(recipients, theirs, strict=True)]
    return sum(theirs), _replacing(document, encode(kept))


def _replacing(document: Document, columns: Document) -> Document:
    """``columns`` as a ``$set``, with the arrays the document has and the new ones lack set to
    None rather than left as they were (a ``$set`` keeps what it does not name)."""
    for field in (USER_IDS, PROFILES, SUPPRESSED):
        if field in document and field not in columns:
            columns[field] = None
    return columns

