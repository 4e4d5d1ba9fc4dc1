"""A chunk RabbitMQ gave up on (``herald.chunks.dead``): its unrecorded recipients count as
failed (``HERALD_DEAD_LETTERED``), so the campaign still finishes and its numbers still add up.
A chunk of a cancelled campaign closes cancelled instead: its rest stays unsent.

A chunk of a staged rollout fails only the recipients of the waves opened so far (the campaign's
wave, read from the store; the wave bucket decides, ``in_waves_up_to``): those of later waves were
never due, and are sent when their wave opens. Such a chunk is not closed: like a chunk a sender
has sent its open waves of (``chunk.py``, ``_not_all_sent``), it is given back pending with
``wave_sent`` set, so the rollout still counts the wave as sent, and with its attempts counted
afresh, so the delivery the next wave offers sends rather than dead-letters it again at once (the
attempts that failed were spent on the waves now recorded).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from herald.domain.documents import Campaign, ChunkStatus
from herald.domain.messages import SendChunk
from herald.domain.outcomes import outcome_at
from herald.domain.rollout import Rollout, in_waves_up_to
from herald.observability import CHUNKS_DEAD_LETTERED
from herald.service_layer.ports import CampaignLookup
from herald.service_layer.sending.claims import ChunkClaims, NotTaken
from herald.service_layer.sending.lifecycle import ChunkLifecycle, Tally

log = logging.getLogger(__name__)

DEAD_LETTERED = "HERALD_DEAD_LETTERED"
"""Error recorded for recipients of a chunk that could not be processed."""


class DeadChunks:
    def __init__(self, lifecycle: ChunkLifecycle, claims: ChunkClaims,
                 is_cancelled: Callable[[str], Awaitable[bool]],
                 campaigns: CampaignLookup) -> None:
        self._lifecycle = lifecycle
        self._claims = claims
        self._is_cancelled = is_cancelled
        self._campaigns = campaigns

    async def settle(self, chunk: SendChunk) -> bool:
        """Record the unsent rest of the open waves as failed and close the chunk (or, with
        later waves still to open, keep it pending for them); False if it is still held (by
        another sender, or by a delivery of it in this process)."""
        with self._claims.first_here(chunk.campaign_id, chunk.seq) as first:
            if not first:
                return False
            taken = await self._claims.take(chunk.campaign_id, chunk.seq)
            if taken is NotTaken.CLOSED:
                return True
            if taken is NotTaken.BUSY:
                return False
            await self._close(chunk)
            return True

    async def _close(self, chunk: SendChunk) -> None:
        recorded = await self._lifecycle.recorded(chunk.campaign_id, chunk.seq)
        tally = Tally.of(recorded)
        rest = [position for position in range(len(chunk.recipients)) if position not in recorded]
        cancelled = await self._is_cancelled(chunk.campaign_id)
        if cancelled:
            rest = []
        opened, wave = await self._open_waves(chunk, rest)
        await self._lifecycle.record(chunk.campaign_id, chunk.seq,
                                     [outcome_at(p, DEAD_LETTERED) for p in opened], tally)
        CHUNKS_DEAD_LETTERED.inc()
        waiting = len(rest) - len(opened)
        log.error("chunk %s:%d dead-lettered; %d recipients recorded as failed%s",
                  chunk.campaign_id, chunk.seq, len(opened),
                  f", {waiting} of later waves kept for their wave" if waiting else "")
        if waiting and wave is not None:
            await self._claims.wait_for_next_wave(chunk.campaign_id, chunk.seq, wave)
            return
        status = ChunkStatus.CANCELLED if cancelled else ChunkStatus.DEAD
        await self._lifecycle.close(chunk.campaign_id, chunk.seq, status, tally)

    async def _open_waves(self, chunk: SendChunk,
                          rest: list[int]) -> tuple[list[int], int | None]:
        """Of ``rest``, the positions in the staged rollout's waves opened so far, and that
        wave (None: no rollout, or its last wave is open: all of them)."""
        waves = _waves_to_come(await self._campaigns.get(chunk.campaign_id))
        if waves is None:
            return rest, None
        rollout, wave = waves
        recipients = chunk.recipients
        return [p for p in rest if in_waves_up_to(chunk.campaign_id, recipients[p].token,
                                                  rollout, wave)], wave


def _waves_to_come(campaign: Campaign | None) -> tuple[Rollout, int] | None:
    """A staged rollout and the wave it opened last, while later ones are still to open."""
    if campaign is None or campaign.rollout is None or campaign.rollout_progress is None:
        return None
    wave = campaign.rollout_progress.wave
    return (campaign.rollout, wave) if wave < campaign.rollout.last_wave else None
