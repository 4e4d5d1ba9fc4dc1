"""Chunks held by a sender whose heartbeat expired are offered to the live senders, without
waiting for RabbitMQ to notice the holder is gone.

A sender the kernel stopped (SIGSTOP, a stalled VM) keeps its AMQP connection open for as long
as the broker's heartbeat allows (60 s, about 170 s seen in practice), and with it the chunk
messages it holds: nobody else would get them before then. The dispatchers' sweep therefore
publishes a copy of each chunk whose holder is no longer in the registry; a live sender takes it
over (``ChunkClaims.take``: the holder is dead, and the claim is conditional on the chunk's
fencing token), skips what was recorded and sends the rest. The stopped sender, when it runs
again, finds the chunk is no longer its own and sends nothing more of it (``fence.py``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from herald.domain.messages import SendChunk
from herald.domain.status import ACTIVE
from herald.service_layer.ports import Bus, CampaignRepository, ChunkRepository, PodRegistry

log = logging.getLogger(__name__)

async def rescue_chunks_of_dead_senders(campaigns: CampaignRepository, chunks: ChunkRepository,
                                        registry: PodRegistry, bus: Bus, now: datetime,
                                        offer_again_after: timedelta) -> int:
    """Offer every chunk held by a sender without a heartbeat again; how many were offered.

    A copy not taken by ``offer_again_after`` is offered again: RabbitMQ may have handed it to
    the stopped sender itself, whose connection is still open (a consumer with room in its
    prefetch); once that is full, copies go to the live ones."""
    live = {pod.id for pod in await registry.live(("sender",))}
    offered = 0
    for status in sorted(ACTIVE):
        for campaign in await campaigns.with_status(status):
            for held in await chunks.held(campaign.id):
                if held.owner in live or not await chunks.mark_rescued(
                        held, now, not_since=now - offer_again_after):
                    continue
                chunk = await chunks.get(campaign.id, held.seq)
                if chunk is None:
                    continue
                await bus.send_chunk(SendChunk(campaign_id=campaign.id, seq=held.seq,
                                               recipients=list(chunk.recipients)))
                log.warning("chunk %s:%d is held by %s, whose heartbeat expired: offered to the "
                            "live senders", campaign.id, held.seq, held.owner)
                offered += 1
    return offered
