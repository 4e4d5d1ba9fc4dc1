"""Creating campaigns: from an HTTP request (idempotently), or as the follow-up of another."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from bson import ObjectId
from pydantic import ValidationError

from herald.adapters.mongo import Document
from herald.adapters.rabbit import Bus
from herald.adapters.stores import Stores
from herald.clock import utcnow
from herald.domain.api import CampaignCreate, CampaignPatch, Content, RetargetRequest
from herald.domain.status import TERMINAL, Status
from herald.domain.timing import AmbiguousTime, first_instant_anywhere, to_utc
from herald.service_layer.recipients import NOT_SENT, UNSENT_ONLY

log = logging.getLogger(__name__)

STALE_KEY_AFTER = timedelta(seconds=30)
"""An idempotency key whose campaign never appeared within this time belonged to a dead request."""

SEND_AT_TOLERANCE = timedelta(seconds=1)


class SendAtInPast(ValueError):
    pass


class IdempotencyMismatch(Exception):
    """The key was used before with a different request body."""


class IdempotencyInFlight(Exception):
    """The first request with this key is still creating its campaign."""


class NotRetargetable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; retarget it once it has finished")
        self.status = status


class NothingToFollowUp(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign was {status.value} before it targeted anyone: there is no "
                         "one to follow up; create it again instead")
        self.status = status


class NotRetryable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a failed campaign can be retried")
        self.status = status


class InvalidChange(ValueError):
    """A change that would leave the campaign invalid (e.g. over FCM's size limit)."""

    def __init__(self, error: ValidationError) -> None:
        super().__init__(str(error))
        self.error = error


class NotEditable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a scheduled campaign can be changed")
        self.status = status


@dataclass(frozen=True)
class Created:
    campaign: Document
    created: bool


def new_campaign_document(*, content: dict[str, Any], name: str | None,
                          audience: dict[str, Any] | None, retarget: dict[str, Any] | None,
                          chunk_size: int, rate_per_s: int | None, due_at: datetime,
                          now: datetime, source: str, schedule_id: str | None = None) -> Document:
    """A fresh campaign document, ``scheduled`` if ``due_at`` is in the future, else ``pending``."""
    status = Status.SCHEDULED if due_at > now else Status.PENDING
    return {
        "_id": ObjectId(), "name": name, **content, "audience": audience, "retarget": retarget,
        "chunk_size": chunk_size, "rate_per_s": rate_per_s, "status": status.value,
        "counts": {"targeted": 0, "sent": 0, "failed": 0},
        "progress": {"chunks_published": 0, "chunks_done": 0},
        "dispatch": {"owner": None, "lease_until": None, "until": None, "next_seq": 0,
                     "done": False, "takeovers": 0},
        "cancel": None, "error": None, "source": source, "schedule_id": schedule_id,
        "created_at": now, "updated_at": now, "due_at": due_at, "started_at": None,
        "finished_at": None,
    }


def _content(request: CampaignCreate | RetargetRequest, base: Document | None = None) -> dict[str, Any]:
    base = base or {}
    fields = {"title": request.title, "body": request.body, "data": request.data,
              "image_url": str(request.image_url) if request.image_url else None}
    return {key: value if value is not None else base.get(key) for key, value in fields.items()}


def _due_at(request: CampaignCreate, now: datetime) -> datetime:
    if request.send_at is None:
        return now
    due_at = to_utc(request.send_at, request.timezone)
    if due_at < now - SEND_AT_TOLERANCE:
        raise SendAtInPast(f"send_at {due_at.isoformat()} is in the past; omit it to send now")
    if request.deliver_in_local_time:
        # Dispatch starts where the wall clock gets there first; it then waits for each zone.
        return max(now, first_instant_anywhere(request.send_at))
    return due_at


def _local_time(request: CampaignCreate) -> dict[str, Any] | None:
    if not request.deliver_in_local_time or request.send_at is None:
        return None
    return {"wall": request.send_at.isoformat(), "timezone": request.timezone}


def fingerprint(request: CampaignCreate) -> str:
    canonical = orjson.dumps(request.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


class CampaignCreator:
    def __init__(self, stores: Stores, bus: Bus) -> None:
        self._stores = stores
        self._bus = bus

    async def create(self, request: CampaignCreate, idempotency_key: str | None) -> Created:
        now = utcnow()
        document = new_campaign_document(
            content=_content(request), name=request.name,
            audience=request.audience.model_dump(mode="json", by_alias=True), retarget=None,
            chunk_size=request.chunk_size, rate_per_s=request.rate_per_s,
            due_at=_due_at(request, now), now=now, source="api")
        document["local_time"] = _local_time(request)
        if idempotency_key is not None:
            earlier = await self._earlier_campaign(idempotency_key, fingerprint(request), document)
            if earlier is not None:
                return Created(earlier, created=False)
        await self.launch(document)
        return Created(document, created=True)

    async def retarget(self, parent_id: str, request: RetargetRequest) -> Document | None:
        """A new campaign to exactly the unsent recipients of a finished one; None if unknown."""
        parent = await self._stores.campaigns.get(parent_id)
        if parent is None:
            return None
        if Status(parent["status"]) not in TERMINAL:
            raise NotRetargetable(Status(parent["status"]))
        if parent["dispatch"].get("owner") is None:
            raise NothingToFollowUp(Status(parent["status"]))
        return await self._follow_up(parent, request, UNSENT_ONLY, "retarget")

    async def retry(self, parent_id: str) -> Document | None:
        """Re-run a ``failed`` campaign for everyone it did not reach: unsent, or failed for a
        reason other than their token (seed 002's manual retry). None if unknown."""
        parent = await self._stores.campaigns.get(parent_id)
        if parent is None:
            return None
        if parent["status"] != Status.FAILED.value:
            raise NotRetryable(Status(parent["status"]))
        return await self._follow_up(parent, RetargetRequest(), NOT_SENT, "retry")

    async def _follow_up(self, parent: Document, request: RetargetRequest, outcome: str,
                         source: str) -> Document:
        now, parent_id = utcnow(), str(parent["_id"])
        document = new_campaign_document(
            content=_content(request, parent),
            name=request.name or f"{parent.get('name') or parent_id} ({source})",
            audience=None, retarget={"campaign_id": parent_id, "outcome": outcome},
            chunk_size=request.chunk_size or parent["chunk_size"],
            rate_per_s=parent.get("rate_per_s"), due_at=now, now=now, source=source,
            schedule_id=parent.get("schedule_id"))
        await self.launch(document)
        return document

    async def launch(self, document: Document) -> None:
        """Store the campaign and, if it is due, wake a dispatcher (its sweep is the fallback)."""
        await self._stores.campaigns.insert(document)
        if document["status"] == Status.PENDING.value:
            await self.wake_dispatcher(str(document["_id"]))

    async def wake_dispatcher(self, campaign_id: str) -> None:
        try:
            await self._bus.request_dispatch(campaign_id)
        except Exception:  # the dispatchers' periodic sweep claims it anyway
            log.warning("could not publish dispatch of %s; the sweep will pick it up",
                        campaign_id, exc_info=True)

    async def _earlier_campaign(self, key: str, print_: str, document: Document) -> Document | None:
        campaign_id = str(document["_id"])
        for _ in range(20):
            bound = await self._stores.idempotency.reserve(key, print_, campaign_id,
                                                           document["created_at"])
            if bound is None:
                return None
            if bound["fingerprint"] != print_:
                raise IdempotencyMismatch(key)
            earlier = await self._stores.campaigns.get(bound["campaign_id"])
            if earlier is not None:
                return earlier
            stale = utcnow() - bound["created_at"] > STALE_KEY_AFTER
            if stale and await self._stores.idempotency.rebind(key, bound["campaign_id"],
                                                                campaign_id):
                return None
            await asyncio.sleep(0.05)
        raise IdempotencyInFlight(key)


def _new_timing(current: Document, patch: CampaignPatch) -> dict[str, Any]:
    """``due_at`` (and the wall clock of a local-time campaign) after moving a campaign."""
    local = current.get("local_time")
    wall = datetime.fromisoformat(local["wall"]) if local else None
    try:
        timing = CampaignCreate(
            title="-", body="-", send_at=patch.send_at or wall, deliver_in_local_time=bool(local),
            timezone=patch.timezone or (local["timezone"] if local else None))
    except ValidationError as exc:
        raise InvalidChange(exc) from exc
    if timing.send_at is None:
        raise AmbiguousTime("a timezone alone does not move a campaign: give send_at too")
    changed: dict[str, Any] = {"due_at": _due_at(timing, utcnow())}
    if local:
        changed["local_time"] = _local_time(timing)
    return changed


async def edit_scheduled(stores: Stores, campaign_id: str, patch: CampaignPatch) -> Document | None:
    """Change the time or content of a campaign that has not fired yet; None if unknown."""
    current = await stores.campaigns.get(campaign_id)
    if current is None:
        return None
    if current["status"] != Status.SCHEDULED.value:
        raise NotEditable(Status(current["status"]))
    changes = patch.model_dump(exclude_unset=True, exclude_none=True, mode="json", by_alias=True,
                               exclude={"send_at", "timezone"})
    merged = {key: changes.get(key, current.get(key)) for key in ("title", "body", "data", "image_url")}
    try:
        Content.model_validate(merged)  # the merged content must still fit FCM's limits
    except ValidationError as exc:
        raise InvalidChange(exc) from exc
    if patch.send_at is not None or patch.timezone is not None:
        changes.update(_new_timing(current, patch))
    updated = await stores.campaigns.patch_scheduled(campaign_id, changes, utcnow())
    if updated is None:  # it fired (or was cancelled) between our read and our write
        latest = await stores.campaigns.get(campaign_id)
        raise NotEditable(Status(latest["status"] if latest else Status.SCHEDULED))
    return updated
