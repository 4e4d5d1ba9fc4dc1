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

from herald.domain.documents import Campaign
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
