"""Paging one campaign's recipients into chunk messages, resumably.

The recipients come from one cursor opened at the checkpoint and iterated (fast on MongoDB and on
nx-27017 alike; a new range query per page re-scans on the latter). For each chunk: write the
chunk document, publish it with a publisher confirm, then checkpoint the campaign (conditional on
still owning the lease). A dispatcher that dies anywhere in that sequence leaves either a
checkpoint or an already-written chunk, from which the next owner resumes without skipping or
re-sending a device.

Each publish first waits until the campaign has fewer than its offer window of chunks out
(published and not closed: ``herald.domain.lanes.offer_window``), so that no campaign stands in
front of another with many chunks, then for room in its queue (``backpressure.py``); while it
waits the campaign's lease is renewed every third of its length, and a cancel, a pause, a
shutdown or a lost lease stop the paging there. A paused dispatcher that dies leaves its
checkpoint like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from herald.clock import utcnow
from herald.domain.documents import Campaign, Cursor
from herald.domain.lanes import offer_window
from herald.domain.messages import Recipient, SendChunk
from herald.domain.quiet_hours import DEFAULT_ZONE, QuietWindow, in_force, plan_waves, touches
from herald.domain.status import Verdict, verdict_for
from herald.domain.timing import Wave
from herald.observability import CHUNKS_PUBLISHED
from herald.service_layer.ports import CampaignRecords
from herald.service_layer.recipients import LocalTimeSource, source_for
from services.dispatcher.backpressure import Backpressure, unbounded

log = logging.getLogger(__name__)


WINDOW_POLL_S = 0.1
WINDOW_POLL_MAX_S = 5.0
Settled = Callable[[Campaign], Awaitable[Campaign | None]]
"""The settler's ``settled``: a campaign whose paging ended is reported to it."""


async def _no_settler(_campaign: Campaign) -> Campaign | None:
    return None


class StopPaging(Exception):
    """Paging must stop here: cancelled, lease lost, or the pod is shutting down."""


class Cancelled(StopPaging):
    """The campaign is being cancelled: paging stops at its checkpoint, and what is beyond it
    stays where it is (the audit, the final counts and a retarget read it from there)."""


class Held(StopPaging):
    """The campaign was paused: paging stops at the checkpoint and the lease is given up, so
    that the resume (``Pausing.resume`` asks for a dispatcher) goes on from there."""


class Parked(Exception):
    """Every due wave of a local-time campaign is paged; the next is due at ``resume_at``."""

    def __init__(self, resume_at: datetime) -> None:
        super().__init__(f"next wave due at {resume_at.isoformat()}")
        self.resume_at = resume_at


class Paging:
    """Pages campaigns for dispatcher ``pod_id``; one ``run`` per claimed campaign."""

    def __init__(self, stores: CampaignRecords, publish: Callable[[SendChunk], Awaitable[None]],
                 verdict: Callable[[str], Awaitable[Verdict]], is_stopping: Callable[[], bool],
                 pod_id: str, lease_s: float, backpressure: Backpressure | None = None,
                 campaign_window: int = 12, settled: Settled = _no_settler,
                 quiet_setting: QuietWindow | None = None) -> None:
        self._stores = stores
        self._quiet_setting = quiet_setting
        self._campaign_window = campaign_window
        self._publish_message = publish
        self._verdict = verdict
        self._settled = settled
        self._is_stopping = is_stopping
        self._pod_id = pod_id
        self._lease = timedelta(seconds=lease_s)
        self._backpressure = backpressure or unbounded()
        self._closed: dict[str, int] = {}
        """Each campaign's count of closed chunks, as last read (``_within_offer_window``)."""

    async def run(self, campaign: Campaign) -> None:
        campaigns = self._stores.campaigns
        try:
            await self._page_all(campaign)
        except StopPaging as stop:
            log.info("paging of %s stopped: %s", campaign.id, stop)
            if self._is_stopping() or isinstance(stop, Held):
                await campaigns.release_dispatch(campaign.id, self._pod_id, utcnow())
            return
        except Parked as parked:
            # The lease simply runs until the next wave: then any dispatcher's sweep takes it.
            log.info("paged the due waves of %s; %s", campaign.id, parked)
            await campaigns.release_dispatch(campaign.id, self._pod_id, parked.resume_at)
            return
        finished = await campaigns.finish_dispatch(campaign.id, self._pod_id, utcnow())
        if finished is not None:
            log.info("paged %s: %d chunks", campaign.id, finished.progress.chunks_published)
            await self._settled(finished)  # its last chunk may have closed already

    async def _page_all(self, campaign: Campaign) -> None:
        campaign = await self._bound(campaign)
        seq = campaign.dispatch.next_seq
        unchecked = await self._stores.chunks.get(campaign.id, seq)
        if unchecked is not None:  # a dead owner wrote it but never checkpointed: publish it
            log.info("resuming %s at chunk %d written by a previous owner", campaign.id, seq)
            cursor = unchecked.state.cursor
            await self._publish(campaign, seq, list(unchecked.recipients), cursor)
            seq += 1
        else:
            cursor = await self._checkpointed_cursor(campaign.id, seq)
        source = await source_for(self._stores, campaign, due_by=utcnow(),
                                  need=campaign.content.profile_need)
        batch: list[Recipient] = []
        position: Cursor = cursor
        async with contextlib.aclosing(source.stream(after=cursor)) as recipients:
            async for position, recipient in recipients:
                batch.append(recipient)
                if len(batch) == campaign.chunk_size:
                    await self._publish(campaign, seq, batch, position)
                    seq, batch = seq + 1, []
            if batch:
                await self._publish(campaign, seq, batch, position)
        if isinstance(source, LocalTimeSource) and (resume_at := source.next_wave_due()):
            raise Parked(resume_at)

    async def _bound(self, campaign: Campaign) -> Campaign:
        """Fix the newest device the campaign may reach (and, for local-time delivery or
        quiet hours, its waves), once, so a resumed run sees the same audience."""
        if campaign.follow_up is not None or campaign.dispatch.until is not None:
            return campaign
        waves = await self._plan_waves(campaign)
        bounded = await self._stores.campaigns.fix_dispatch_bound(
            campaign.id, self._pod_id, await self._stores.devices.newest_id(), waves)
        if bounded is None:
            raise StopPaging("campaign vanished")
        return bounded

    async def _plan_waves(self, campaign: Campaign) -> list[Wave] | None:
        """Its waves: by local time, by quiet hours, or both; None when it has neither, or
        when quiet hours hold and skip none of its zones (it is paged as one)."""
        quiet = in_force(campaign.quiet_hours, campaign.purpose, self._quiet_setting)
        local, reach = campaign.local_time, campaign.reach
        if (local is None and quiet is None) or reach is None:
            return None
        zones = await self._stores.devices.timezones(reach)
        default = local.timezone if local else quiet.timezone if quiet else DEFAULT_ZONE
        wall = datetime.fromisoformat(local.wall) if local else None
        waves = plan_waves(utcnow(), default, zones, quiet, wall)
        if local is None and not touches(waves):
            return None
        log.info("%s: %d waves (local time: %s, quiet hours: %s), from %s to %s", campaign.id,
                 len(waves), local is not None, quiet is not None, waves[0].due_at.isoformat(),
                 waves[-1].due_at.isoformat())
        return waves

    async def _checkpointed_cursor(self, campaign_id: str, next_seq: int) -> Cursor:
        """Where the last checkpointed chunk ended (None: paging starts at the beginning)."""
        if next_seq == 0:
            return None
        previous = await self._stores.chunks.state(campaign_id, next_seq - 1)
        return previous.cursor if previous else None

    async def _publish(self, campaign: Campaign, seq: int, recipients: list[Recipient],
                       cursor: Cursor) -> None:
        campaign_id = campaign.id
        await self.may_go_on(campaign_id)
        waiting = _Paused(self, campaign_id)
        await self._within_offer_window(campaign, seq, waiting)
        async with self._backpressure.room(campaign.route, waiting.keep_going):
            now = utcnow()
            chunk = await self._stores.chunks.create(campaign_id, seq, recipients, cursor, now)
            await self._publish_message(campaign.chunk_message(seq, chunk.recipients))
        CHUNKS_PUBLISHED.inc()
        if not await self._stores.campaigns.checkpoint(campaign_id, self._pod_id, seq,
                                                       chunk.state.size, now + self._lease):
            raise StopPaging("lease lost to another dispatcher")

    async def may_go_on(self, campaign_id: str) -> None:
        """The pod's one question (``stopping/verdict.py``): stop paging on a shutdown, a
        cancel or a pause (the checkpoint stays: the resume goes on from it, and a cancelled
        campaign's unsent rest is what lies beyond it)."""
        if self._is_stopping():
            raise StopPaging("pod shutting down")
        _go_on_as(await self._verdict(campaign_id))

    async def _within_offer_window(self, campaign: Campaign, seq: int, waiting: _Paused) -> None:
        """Wait until fewer than the campaign's offer window of its chunks are out (published,
        not closed), reading its count of closed chunks only when the window may be full. A
        staged rollout's chunks stay pending until their last wave, so its waves are bounded
        by the queues alone."""
        if campaign.rollout is not None:
            return
        window = offer_window(campaign.rate_per_s, campaign.chunk_size, self._campaign_window)
        closed = self._closed.get(campaign.id, 0)
        while seq - closed >= window:
            current = await self._stores.campaigns.get(campaign.id)
            if current is None:
                raise StopPaging("campaign vanished")
            closed = self._closed[campaign.id] = current.progress.chunks_done
            if seq - closed < window:
                return
            _go_on_as(verdict_for(current.status))  # the read says it: no second one
            await waiting.keep_going(asked=True)
            await asyncio.sleep(_window_poll_s(campaign))

def _go_on_as(verdict: Verdict) -> None:
    if verdict is Verdict.STOP:
        raise Cancelled("cancelled")
    if verdict is Verdict.HOLD:
        raise Held("paused")


def _window_poll_s(campaign: Campaign) -> float:
    """How often a campaign whose offer window is full reads its count of closed chunks again:
    often for an uncapped one, about four times per chunk's sending for a capped one."""
    if campaign.rate_per_s is None:
        return WINDOW_POLL_S
    return min(WINDOW_POLL_MAX_S, max(WINDOW_POLL_S, campaign.chunk_size / campaign.rate_per_s / 4))


class _Paused:
    """A campaign's paging waiting for room: it stops on a cancel, a shutdown or a lost lease,
    and renews its lease every third of its length."""

    def __init__(self, paging: Paging, campaign_id: str) -> None:
        self._paging = paging
        self._campaign_id = campaign_id
        self._renewed_at = time.monotonic()

    async def keep_going(self, *, asked: bool = False) -> None:
        """Stop, or renew the lease when due (``asked``: the verdict was just asked)."""
        paging = self._paging
        if asked:
            if paging._is_stopping():
                raise StopPaging("pod shutting down")
        else:
            await paging.may_go_on(self._campaign_id)
        if time.monotonic() - self._renewed_at >= paging._lease.total_seconds() / 3:
            self._renewed_at = time.monotonic()
            if not await paging._stores.campaigns.renew_lease(
                    self._campaign_id, paging._pod_id, utcnow() + paging._lease):
                raise StopPaging("lease lost to another dispatcher")
