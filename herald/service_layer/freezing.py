"""Freezing at a cancel: what a cancelled dispatcher never paged becomes chunks that are never
published, so that the campaign's recipients are fixed from then on (the audit's ``unsent`` list,
the final counts and a retarget all read the same frozen chunks)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from herald.clock import utcnow
from herald.domain.documents import Campaign, ChunkStatus, Cursor
from herald.domain.messages import Recipient
from herald.service_layer.ports import CampaignRecords
from herald.service_layer.recipients import source_for

FROZEN_CHUNK_SIZE = 5000
"""Recipients per frozen chunk. Frozen chunks are never sent, so only the number of writes at a
cancel matters: a campaign of chunks of 5 cancelled early froze thousands of them one write at a
time (a document of 5,000 recipients is under 1 MB)."""


async def freeze_unpaged(stores: CampaignRecords, campaign: Campaign) -> Campaign | None:
    """Write what a cancelled dispatcher never paged as chunks that are never published.

    From then on the campaign's recipients are fixed: the audit's ``unsent`` list, the final
    counts and a retarget all read the same frozen chunks, whatever later happens to the devices.
    Returns the updated campaign, or None when there was nothing left to page.
    """
    if not campaign.source_not_exhausted:
        return None
    seq = campaign.dispatch.next_seq
    cursor, seq = await _count_unchecked(stores, campaign, seq)
    source = await source_for(stores, campaign)
    await freeze_rest(stores, campaign, seq, [], cursor, source.stream(after=cursor))
    return await stores.campaigns.close_paging(campaign.id)


async def freeze_rest(stores: CampaignRecords, campaign: Campaign, seq: int, batch: list[Recipient],
                      cursor: Cursor, rest: AsyncIterator[tuple[Cursor, Recipient]]) -> bool:
    """Freeze ``batch`` (recipients up to ``cursor``) and then ``rest`` as chunks from ``seq``
    on (see ``freeze_unpaged``). A cancelled dispatcher calls it with its own open cursor, so the
    rest of the audience is not read a second time; False if the campaign's chunk count had moved
    on (someone else froze it: the finalizer picks up from there)."""
    batch = list(batch)
    size = max(campaign.chunk_size, FROZEN_CHUNK_SIZE)
    async for cursor, recipient in rest:
        batch.append(recipient)
        if len(batch) >= size:
            if not await _freeze(stores, campaign, seq, batch, cursor):
                return False
            seq, batch = seq + 1, []
    return not batch or await _freeze(stores, campaign, seq, batch, cursor)


async def _count_unchecked(stores: CampaignRecords, campaign: Campaign, seq: int) -> tuple[Cursor, int]:
    """Where freezing starts: after a chunk a dead dispatcher wrote but never checkpointed
    (counted now), or after the last checkpointed chunk. The cursor and the next seq."""
    written = await stores.chunks.state(campaign.id, seq)
    if written is not None:
        await stores.campaigns.count_frozen_chunk(campaign.id, seq, written.size)
        return written.cursor, seq + 1
    previous = await stores.chunks.state(campaign.id, seq - 1) if seq else None
    return (previous.cursor if previous else None), seq


async def _freeze(stores: CampaignRecords, campaign: Campaign, seq: int, recipients: list[Recipient],
                  cursor: Cursor) -> bool:
    chunk = await stores.chunks.create(campaign.id, seq, recipients, cursor, utcnow(),
                                       status=ChunkStatus.CANCELLED)
    return await stores.campaigns.count_frozen_chunk(campaign.id, seq, chunk.state.size)
