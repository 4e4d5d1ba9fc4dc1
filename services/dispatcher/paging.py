"""Paging one campaign's recipients into chunk messages, resumably.

The recipients come from one cursor opened at the checkpoint and iterated (fast on MongoDB and on
nx-27017 alike; a new range query per page re-scans on the latter). For each chunk: write the
chunk document, publish it with a publisher confirm, then checkpoint the campaign (conditional on
still owning the lease). A dispatcher that dies anywhere in that sequence leaves either a
checkpoint or an already-written chunk, from which the next owner resumes without skipping or
re-sending a device.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId

from herald.adapters.mongo import Document
from herald.clock import utcnow
from herald.domain.audience import Audience, audience_query
from herald.domain.messages import Recipient, SendChunk
from herald.domain.timing import local_time_waves
from herald.observability import CHUNKS_PUBLISHED
from herald.runtime import Pod
from herald.service_layer.completion import all_chunks_finished, finalize
from herald.service_layer.recipients import LocalTimeSource, source_for

log = logging.getLogger(__name__)


class StopPaging(Exception):
    """Paging must stop here: cancelled, lease lost, or the pod is shutting down."""


class Parked(Exception):
    """Every due wave of a local-time campaign is paged; the next is due at ``resume_at``."""

    def __init__(self, resume_at: datetime) -> None:
        super().__init__(f"next wave due at {resume_at.isoformat()}")
        self.resume_at = resume_at


class Paging:
    def __init__(self, pod: Pod, campaign: Document, is_stopping: Any) -> None:
        self._pod = pod
        self._campaign = campaign
        self._id: ObjectId = campaign["_id"]
        self._campaign_id = str(campaign["_id"])
        self._is_stopping = is_stopping
        self._lease = timedelta(seconds=pod.settings.lease_s)

    async def run(self) -> None:
        try:
            await self._page_all()
        except StopPaging as stop:
            log.info("paging of %s stopped: %s", self._campaign_id, stop)
            if self._is_stopping():
                await self._pod.stores.campaigns.release_dispatch(self._id, self._pod.id,
                                                                  utcnow())
            return
        except Parked as parked:
            # The lease simply runs until the next wave: then any dispatcher's sweep takes it.
            log.info("paged the due waves of %s; %s", self._campaign_id, parked)
            await self._pod.stores.campaigns.release_dispatch(self._id, self._pod.id,
                                                              parked.resume_at)
            return
        finished = await self._pod.stores.campaigns.finish_dispatch(self._id, self._pod.id,
                                                                    utcnow())
        if finished is not None:
            log.info("paged %s: %d chunks", self._campaign_id,
                     finished["progress"]["chunks_published"])
            if all_chunks_finished(finished):
                await finalize(self._pod.stores, self._campaign_id)

    async def _page_all(self) -> None:
        campaign = await self._bound(self._campaign)
        seq = campaign["dispatch"]["next_seq"]
        cursor = await self._resume_cursor(seq)
        if cursor is not _NOT_WRITTEN:
            seq += 1
        else:
            cursor = await self._checkpointed_cursor(seq)
        size = campaign["chunk_size"]
        source = await source_for(self._pod.stores, campaign, due_by=utcnow())
        batch: list[dict[str, Any]] = []
        async with contextlib.aclosing(source.stream(after=cursor)) as recipients:
            async for position, recipient in recipients:
                batch.append(recipient)
                if len(batch) == size:
                    await self._publish(seq, batch, position)
                    seq, batch = seq + 1, []
        if batch:
            await self._publish(seq, batch, position)
        if isinstance(source, LocalTimeSource) and (resume_at := source.next_wave_due()):
            raise Parked(resume_at)

    async def _bound(self, campaign: Document) -> Document:
        """Fix the newest device the campaign may reach (and, for local-time delivery, its
        waves), once, so a resumed run sees the same audience."""
        dispatch = campaign["dispatch"]
        if campaign.get("retarget") or dispatch.get("until") is not None:
            return campaign
        stores = self._pod.stores
        waves = await self._plan_waves(campaign) if campaign.get("local_time") else None
        bounded = await stores.campaigns.fix_dispatch_bound(
            self._id, self._pod.id, await stores.devices.newest_id(), waves)
        if bounded is None:
            raise StopPaging("campaign vanished")
        return bounded

    async def _plan_waves(self, campaign: Document) -> list[dict[str, Any]]:
        local = campaign["local_time"]
        zones = await self._pod.stores.devices.timezones(
            audience_query(Audience.model_validate(campaign["audience"])))
        waves = local_time_waves(datetime.fromisoformat(local["wall"]), local["timezone"], zones)
        log.info("%s: %d waves of local-time delivery, from %s to %s", self._campaign_id,
                 len(waves), waves[0].due_at.isoformat(), waves[-1].due_at.isoformat())
        return [{"due_at": w.due_at, "zones": list(w.zones), "others": w.others} for w in waves]

    async def _checkpointed_cursor(self, next_seq: int) -> Any:
        if next_seq == 0:
            return None
        previous = await self._pod.stores.chunks.get(self._campaign_id, next_seq - 1)
        return previous["cursor"] if previous else None

    async def _resume_cursor(self, seq: int) -> Any:
        """A chunk a dead owner wrote but never checkpointed: publish it again, as written."""
        written = await self._pod.stores.chunks.get(self._campaign_id, seq)
        if written is None:
            return _NOT_WRITTEN
        log.info("resuming %s at chunk %d written by a previous owner", self._campaign_id, seq)
        await self._publish(seq, written["recipients"], written["cursor"])
        return written["cursor"]

    async def _publish(self, seq: int, recipients: list[dict[str, Any]], cursor: Any) -> None:
        if self._is_stopping():
            raise StopPaging("pod shutting down")
        if await self._pod.is_cancelled(self._campaign_id):
            raise StopPaging("cancelled")
        stores, now = self._pod.stores, utcnow()
        chunk = await stores.chunks.create(self._campaign_id, seq, recipients, cursor, now)
        await self._pod.bus.send_chunk(SendChunk(
            campaign_id=self._campaign_id, seq=seq,
            recipients=[Recipient(**r) for r in chunk["recipients"]]))
        CHUNKS_PUBLISHED.inc()
        if not await stores.campaigns.checkpoint(self._id, self._pod.id, seq, chunk["size"],
                                                 now + self._lease):
            raise StopPaging("lease lost to another dispatcher")


_NOT_WRITTEN = object()
