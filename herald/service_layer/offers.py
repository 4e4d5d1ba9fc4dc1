"""Offering a campaign's pending chunks to the senders again, and opening a staged rollout's next
wave: what a resume and the rollout's driver both do (``pausing.py``, ``rollout.py``)."""

from __future__ import annotations

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.rollout import RolloutProgress
from herald.service_layer.ports import Bus, CampaignRecords


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


async def open_next_wave(stores: CampaignRecords, campaign: Campaign) -> Campaign | None:
    """Move a staged rollout from the wave it holds to the next (conditional on the wave read:
    of a resume and the driver doing it at once, one does); None if it has no next wave or
    someone moved it first. The caller offers the pending chunks."""
    rollout, progress = campaign.rollout, campaign.rollout_progress
    if rollout is None or progress is None or progress.wave >= rollout.last_wave:
        return None
    moved = RolloutProgress(wave=progress.wave + 1, figures=progress.figures,
                            checked_at=utcnow(), sent=progress.sent, failed=progress.failed)
    return await stores.campaigns.update_rollout(campaign.id, progress.wave, moved)
