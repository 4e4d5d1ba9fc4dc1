"""Who a campaign reaches, and what happened to each of them.

Two questions share this module because each answers part of the other:
- *recipient sources*: the ordered, resumable stream of recipients a dispatcher pages into chunks
  (an audience over the device registry, or the unsent recipients of an earlier campaign);
- *the audit*: per recipient, ``sent``/``failed`` as recorded from FCM's answers, and ``unsent``
  for everyone targeted (in a chunk, or still in the source past the last chunk) but not recorded.
Final counts are computed from the audit itself, so the numbers and the lists never disagree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from herald.adapters.chunks import ChunkStatus, Recorded, recorded_in
from herald.adapters.fcm import TOKEN_IS_DEAD
from herald.adapters.mongo import Document
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.audience import Audience, audience_query

SENT = "sent"
FAILED = "failed"
UNSENT = "unsent"
OUTCOMES = (SENT, FAILED, UNSENT)

UNSENT_ONLY = "unsent"
"""A follow-up's source: the parent's recipients that were never sent (retarget)."""
NOT_SENT = "not_sent"
"""A follow-up's source: unsent, or failed for a reason other than their token (retry)."""


@dataclass(frozen=True, slots=True)
class RecipientLine:
    """One line of the audit."""

    token: str
    user_id: str | None
    outcome: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"token": self.token, "user_id": self.user_id, "outcome": self.outcome,
                "error": self.error}


@dataclass(frozen=True, slots=True)
class FinalCounts:
    targeted: int
    sent: int
    failed: int
    failed_not_by_token: int = 0
    """Failures a retry could fix (quota, outages, dead-lettered chunks), not dead tokens."""

    def as_document(self) -> dict[str, int]:
        return {"counts.targeted": self.targeted, "counts.sent": self.sent,
                "counts.failed": self.failed}


TOKEN_ERRORS = frozenset(error.value for error in TOKEN_IS_DEAD)
"""Failures that say the device's token is dead: sending again would fail again."""


class RecipientSource(Protocol):
    def stream(self, after: Any) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        """Recipients ``{token, user_id}`` after position ``after``, each with its position."""
        ...


class AudienceSource:
    """Devices matching an audience, in ``_id`` order, up to the newest device at claim time."""

    def __init__(self, stores: Stores, audience: Audience, until: Any) -> None:
        self._stores = stores
        self._query = audience_query(audience)
        self._until = until

    async def stream(self, after: Any) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        async for device in self._stores.devices.stream(self._query, after, self._until):
            yield device["_id"], {"token": device["token"], "user_id": device.get("user_id")}


class UnsentOf:
    """Recipients a finished campaign did not reach, by position in its audit: the unsent ones,
    and with ``include_failed`` also those that failed for a reason other than their token."""

    def __init__(self, stores: Stores, parent: Document, *, include_failed: bool = False) -> None:
        self._stores = stores
        self._parent = parent
        self._include_failed = include_failed

    async def stream(self, after: Any) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        position = 0
        async for line in self._not_reached():
            position += 1
            if after is None or position > after:
                yield position, {"token": line.token, "user_id": line.user_id}

    async def _not_reached(self) -> AsyncIterator[RecipientLine]:
        if self._include_failed:
            async for line in audit(self._stores, self._parent, FAILED):
                if line.error not in TOKEN_ERRORS:
                    yield line
        async for line in unsent(self._stores, self._parent):
            yield line


class LocalTimeSource:
    """Per-device local-time delivery: the audience wave by wave (a wave is the timezones where
    the campaign's wall-clock time happens at one instant), each in ``_id`` order.

    Positions are ``[wave, device _id]``. With ``due_by`` the stream stops before the first wave
    that is not due yet; without it, it runs to the end (what the audit counts as unsent).
    """

    def __init__(self, stores: Stores, audience: Audience, waves: list[dict[str, Any]],
                 until: Any, due_by: datetime | None) -> None:
        self._stores = stores
        self._query = audience_query(audience)
        self._waves = waves
        self._until = until
        self._due_by = due_by
        self._listed = sorted({zone for wave in waves for zone in wave["zones"]})

    def _wave_query(self, wave: dict[str, Any]) -> dict[str, Any]:
        own: dict[str, Any] = {"timezone": {"$in": wave["zones"]}}
        if wave["others"]:  # no timezone, or one unknown when the waves were planned
            own = {"$or": [own, {"timezone": {"$nin": self._listed}}]}
        return {**self._query, **own}

    async def stream(self, after: Any) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        first_wave, after_id = (after[0], after[1]) if after else (0, None)
        for index in range(first_wave, len(self._waves)):
            wave = self._waves[index]
            if self._due_by is not None and wave["due_at"] > self._due_by:
                return
            start = after_id if index == first_wave else None
            async for device in self._stores.devices.stream(self._wave_query(wave), start,
                                                            self._until):
                yield [index, device["_id"]], {"token": device["token"],
                                               "user_id": device.get("user_id")}

    def next_wave_due(self) -> datetime | None:
        """When the first wave this stream stopped before is due (None: nothing left)."""
        if self._due_by is None:
            return None
        return min((w["due_at"] for w in self._waves if w["due_at"] > self._due_by), default=None)


async def source_for(stores: Stores, campaign: Document,
                     due_by: datetime | None = None) -> RecipientSource:
    """Where ``campaign``'s recipients come from; ``due_by`` limits local-time waves to the due."""
    retarget = campaign.get("retarget")
    if retarget:
        parent = await stores.campaigns.get(retarget["campaign_id"])
        if parent is None:
            raise LookupError(f"campaign {retarget['campaign_id']} is gone")
        return UnsentOf(stores, parent, include_failed=retarget["outcome"] == NOT_SENT)
    audience = Audience.model_validate(campaign["audience"])
    dispatch = campaign["dispatch"]
    if campaign.get("local_time") and dispatch.get("waves") is not None:
        return LocalTimeSource(stores, audience, dispatch["waves"], dispatch.get("until"), due_by)
    return AudienceSource(stores, audience, dispatch.get("until"))


def _source_not_exhausted(campaign: Document) -> bool:
    """The dispatcher started paging but did not reach the end of the source."""
    dispatch = campaign.get("dispatch") or {}
    started = dispatch.get("owner") is not None
    return started and not dispatch.get("done", False)


async def _recorded_by_chunk(stores: Stores, campaign_id: str) -> AsyncIterator[tuple[int, Recorded]]:
    """Recorded outcomes grouped by chunk, in chunk order; a position recorded twice counts once."""
    seq: int | None = None
    group: Recorded = {}
    async for delivery in stores.deliveries.in_order(campaign_id):
        if delivery["seq"] != seq:
            if seq is not None:
                yield seq, group
            seq, group = delivery["seq"], {}
        recorded_in(delivery, group)
    if seq is not None:
        yield seq, group


class _Lookahead:
    """Walks the recorded groups alongside the chunks, both in chunk order."""

    def __init__(self, groups: AsyncIterator[tuple[int, Recorded]]) -> None:
        self._groups = groups
        self._head: tuple[int, Recorded] | None = None
        self._done = False

    async def for_chunk(self, seq: int) -> Recorded:
        while not self._done and (self._head is None or self._head[0] < seq):
            self._head = await anext(self._groups, None)
            self._done = self._head is None
        if self._head is not None and self._head[0] == seq:
            return self._head[1]
        return {}


_NOTHING = object()


def _outcome_of(recorded: Recorded, position: int) -> tuple[str, str | None]:
    error = recorded.get(position, _NOTHING)
    if error is _NOTHING:
        return UNSENT, None
    return (SENT, None) if error is None else (FAILED, str(error))


async def audit(stores: Stores, campaign: Document, outcome: str) -> AsyncIterator[RecipientLine]:
    """The recipients of ``campaign`` whose outcome is ``outcome``, in chunk order.

    ``unsent`` also covers the part of the source the dispatcher never paged (it stopped early).
    """
    campaign_id = str(campaign["_id"])
    records = _Lookahead(_recorded_by_chunk(stores, campaign_id))
    cursor = None
    async for chunk in stores.chunks.in_order(campaign_id):
        recorded = await records.for_chunk(chunk["seq"])
        cursor = chunk["cursor"]
        for position, recipient in enumerate(chunk["recipients"]):
            found, error = _outcome_of(recorded, position)
            if found == outcome:
                yield RecipientLine(recipient["token"], recipient.get("user_id"), found, error)
    if outcome == UNSENT and _source_not_exhausted(campaign):
        source = await source_for(stores, campaign)
        async for _, recipient in source.stream(after=cursor):
            yield RecipientLine(recipient["token"], recipient.get("user_id"), UNSENT)


def unsent(stores: Stores, campaign: Document) -> AsyncIterator[RecipientLine]:
    """Targeted but neither sent nor failed: the rest of every chunk, then the unpaged source."""
    return audit(stores, campaign, UNSENT)


async def freeze_unpaged(stores: Stores, campaign: Document) -> Document | None:
    """Write what a cancelled dispatcher never paged as chunks that are never published.

    From then on the campaign's recipients are fixed: the audit's ``unsent`` list, the final
    counts and a retarget all read the same frozen chunks, whatever later happens to the devices.
    Returns the updated campaign, or None when there was nothing left to page.
    """
    if not _source_not_exhausted(campaign):
        return None
    campaign_id, chunk_size = str(campaign["_id"]), campaign["chunk_size"]
    seq = campaign["dispatch"].get("next_seq", 0)
    cursor = await _count_unchecked(stores, campaign, seq)
    if cursor is not _NOTHING:
        seq += 1
    else:
        previous = await stores.chunks.state(campaign_id, seq - 1) if seq else None
        cursor = previous["cursor"] if previous else None
    source = await source_for(stores, campaign)
    batch: list[dict[str, Any]] = []
    async for position, recipient in source.stream(after=cursor):
        batch.append(recipient)
        if len(batch) == chunk_size:
            await _freeze(stores, campaign, seq, batch, position)
            seq, batch = seq + 1, []
    if batch:
        await _freeze(stores, campaign, seq, batch, position)
    return await stores.campaigns.close_paging(campaign["_id"])


async def _count_unchecked(stores: Stores, campaign: Document, seq: int) -> Any:
    """A chunk a dead dispatcher wrote but never checkpointed: count it; its cursor, or nothing."""
    written = await stores.chunks.state(str(campaign["_id"]), seq)
    if written is None:
        return _NOTHING
    await stores.campaigns.count_frozen_chunk(campaign["_id"], seq, written["size"])
    return written["cursor"]


async def _freeze(stores: Stores, campaign: Document, seq: int,
                  recipients: list[dict[str, Any]], cursor: Any) -> None:
    chunk = await stores.chunks.create(str(campaign["_id"]), seq, recipients, cursor, utcnow(),
                                       status=ChunkStatus.CANCELLED)
    await stores.campaigns.count_frozen_chunk(campaign["_id"], seq, chunk["size"])


async def targeted(stores: Stores, campaign: Document) -> int:
    """Every recipient of every chunk, plus what the source still holds if paging stopped early.

    The checkpoints counted each published chunk once; a chunk its dispatcher wrote but died
    before checkpointing is added; then the unpaged rest of the source, counted from the last
    chunk's position.
    """
    campaign_id, dispatch = str(campaign["_id"]), campaign["dispatch"]
    total = campaign["counts"]["targeted"]
    next_seq = dispatch.get("next_seq", 0)
    unchecked = await stores.chunks.state(campaign_id, next_seq)
    last = unchecked or (await stores.chunks.state(campaign_id, next_seq - 1) if next_seq else None)
    if unchecked is not None:
        total += unchecked["size"]
    if _source_not_exhausted(campaign):
        source = await source_for(stores, campaign)
        total += sum([1 async for _ in source.stream(after=last["cursor"] if last else None)])
    return int(total)


async def final_counts(stores: Stores, campaign: Document) -> FinalCounts:
    """Exact counts from the records (what the audit lists), read once a campaign is finished."""
    campaign_id = str(campaign["_id"])
    sent = failed = retryable = 0
    async for _, group in _recorded_by_chunk(stores, campaign_id):
        errors = [error for error in group.values() if error is not None]
        sent += len(group) - len(errors)
        failed += len(errors)
        retryable += sum(error not in TOKEN_ERRORS for error in errors)
    return FinalCounts(targeted=await targeted(stores, campaign), sent=sent, failed=failed,
                       failed_not_by_token=retryable)
