"""Offering a campaign's kept chunks to the senders again: after a resume (this module's
``ResumeOffers.recover``, part of the dispatchers' sweep) and when a staged rollout opens its
next wave (``rollout.py``).

A resume changes only the store (``stopping/decide.py``); the chunks a pause kept (pending in
MongoDB, nobody holding them) are published again here, once per resume: the write that marks
them offered is conditional on the resume's decision, so of several sweeps one offers.
"""

from __future__ import annotations

import logging
from datetime import datetime

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.status import Status
from herald.service_layer.ports import Bus, CampaignRecords

log = logging.getLogger(__name__)


async def offer_pending(stores: CampaignRecords, bus: Bus, campaign: Campaign) -> int:
    """Publish every chunk of the campaign not closed yet, on its route; how many. A copy that
    meets an older one is only acknowledged (the chunk is held or closed by then), and a sender
    skips what was recorded, so nobody is sent twice."""
    offered = 0
    for state in await stores.chunks.pending(campaign.id):
        chunk = await stores.chunks.get(campaign.id, state.seq)
        if chunk is not None:
            await bus.send_chunk(campaign.chunk_message(state.seq, chunk.recipients))
            offered += 1
    return offered


class ResumeOffers:
    def __init__(self, stores: CampaignRecords, bus: Bus) -> None:
        self._stores = stores
        self._bus = bus

    async def offer_now(self, resumed: Campaign) -> Campaign:
        """The resume's own attempt (the decider's hook, in the api): offer the kept chunks and
        wake a dispatcher at once; marked offered only once every chunk was published, so if
        RabbitMQ is away the sweep offers them instead (a copy offered twice is only
        acknowledged). Never raises: the resume stands either way."""
        pause = resumed.pause
        if resumed.status is not Status.IN_PROGRESS or pause is None or pause.resume_id is None:
            return resumed
        try:
            offered = await offer_pending(self._stores, self._bus, resumed)
            if not resumed.dispatch.done:
                await self._bus.request_dispatch(resumed.id)
            await self._stores.campaigns.mark_offered(resumed.id, pause.resume_id, utcnow())
        except Exception:  # best effort: the sweep offers them
            log.warning("offering the kept chunks of %s failed; the sweep offers them",
                        resumed.id, exc_info=True)
        else:
            log.info("campaign %s resumed: %d kept chunks offered again", resumed.id, offered)
        return resumed

    async def recover(self, now: datetime) -> None:
        """Offer the kept chunks of every campaign resumed since the last sweep; one whose
        paging was not over is paged on by any dispatcher (its lease was given up at the
        pause)."""
        for campaign in await self._stores.campaigns.resumed_unoffered():
            pause = campaign.pause
            if pause is None or pause.resume_id is None:
                continue
            if await self._stores.campaigns.mark_offered(campaign.id, pause.resume_id, now):
                offered = await offer_pending(self._stores, self._bus, campaign)
                log.info("campaign %s resumed: %d kept chunks offered again", campaign.id,
                         offered)
