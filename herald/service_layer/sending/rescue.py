"""Chunks held by a sender whose heartbeat expired are offered to the live senders, without
waiting for RabbitMQ to notice the holder is gone.

A sender the kernel stopped (SIGSTOP, a stalled VM) keeps its AMQP connection open for as long
as the broker's heartbeat allows (60 s, about 170 s seen in practice), and with it the chunk
messages it holds: nobody else would get them before then. The dispatchers' sweep therefore
publishes a copy of

- each chunk whose holder is no longer in the registry: a live sender takes it over
  (``ChunkClaims.take``: the holder is dead, and the claim is conditional on the chunk's fencing
  token), skips what was recorded and sends the rest; the stopped sender, when it runs again,
  finds the chunk is no longer its own and sends nothing more of it (``fence.py``);
- each chunk nobody holds that has waited a while although nothing is ready in
  ``herald.chunks``: its message was delivered to a consumer that stopped before it could claim
  it. A copy that meets the original later is only acknowledged (the chunk is held or closed).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from herald.domain.documents import Campaign, ChunkState
from herald.domain.lanes import Route
from herald.domain.status import ACTIVE
from herald.service_layer.ports import Bus, CampaignRepository, ChunkRepository, PodRegistry

log = logging.getLogger(__name__)

class ChunkRescue:
    """The rescue's part of the dispatchers' sweep: ``recover(now)`` at most twice per
    heartbeat TTL, so that chunks a stopped sender holds are taken over within its heartbeat's
    life and one sweep, not when RabbitMQ drops its connection."""

    def __init__(self, campaigns: CampaignRepository, chunks: ChunkRepository,
                 registry: PodRegistry, bus: Bus, heartbeat_ttl_s: float) -> None:
        self._campaigns = campaigns
        self._chunks = chunks
        self._registry = registry
        self._bus = bus
        self._every_s = heartbeat_ttl_s / 2
        self._offer_again_after = timedelta(seconds=2 * heartbeat_ttl_s)
        self._rescued_at = 0.0

    async def recover(self, now: datetime) -> int:
        at = time.monotonic()
        if at - self._rescued_at < self._every_s:
            return 0
        self._rescued_at = at
        return await rescue_chunks_of_dead_senders(self._campaigns, self._chunks, self._registry,
                                                   self._bus, now, self._offer_again_after)


async def rescue_chunks_of_dead_senders(campaigns: CampaignRepository, chunks: ChunkRepository,
                                        registry: PodRegistry, bus: Bus, now: datetime,
                                        offer_again_after: timedelta) -> int:
    """Offer every chunk held by a sender without a heartbeat again; how many were offered.
    One read of every pending chunk, then of the campaigns of those that may be stuck
    (``_running``).

    A copy not taken by ``offer_again_after`` is offered again: RabbitMQ may have handed it to
    the stopped sender itself, whose connection is still open (a consumer with room in its
    prefetch); once that is full, copies go to the live ones."""
    live = {pod.id for pod in await registry.live(("sender",))}
    waited_since = now - offer_again_after
    maybe_stuck = [state for state in await chunks.pending_everywhere()
                   if _stuck(state, live, True, waited_since) is not None]
    running = await _running(campaigns, {state.campaign_id for state in maybe_stuck})
    ready: dict[Route, int] = {}
    offered = 0
    for state in maybe_stuck:
        campaign = running.get(state.campaign_id)
        if campaign is None or _waits_for_its_wave(campaign, state):
            continue
        if campaign.route not in ready:
            ready[campaign.route] = await bus.chunks_ready(campaign.route)
        why = _stuck(state, live, ready[campaign.route] == 0, waited_since)
        if why and await chunks.mark_rescued(state, now, not_since=waited_since):
            offered += await _offer(chunks, bus, campaign, state, why)
    return offered


READ_ALL_FROM = 16
"""Campaigns to look up from which the rescue reads every running campaign in one query per
status instead of each alone: chunks of capped campaigns waiting in their queue beyond the
senders' prefetch all look stuck until the queue's depth says otherwise, and with 1,000 such
campaigns one ``get`` each cost most of the sweep (``bench.sweep``)."""


async def _running(campaigns: CampaignRepository, ids: set[str]) -> dict[str, Campaign]:
    """The campaigns of ``ids`` that pods may still be sending (``ACTIVE``), by id."""
    if len(ids) < READ_ALL_FROM:
        found = [await campaigns.get(campaign_id) for campaign_id in ids]
    else:
        found = [campaign for status in ACTIVE for campaign in await campaigns.with_status(status)]
    return {campaign.id: campaign for campaign in found
            if campaign is not None and campaign.id in ids and campaign.status in ACTIVE}


def _waits_for_its_wave(campaign: Campaign, state: ChunkState) -> bool:
    """An unclaimed chunk of a staged rollout whose open wave is sent: it waits, pending, for
    the next wave, which offers it again (``offers.py``); it is not lost."""
    progress = campaign.rollout_progress
    return (state.owner is None and progress is not None
            and state.wave_sent >= progress.wave)


def _stuck(state: ChunkState, live: set[str], nothing_ready: bool,
           waited_since: datetime) -> str | None:
    """Why the chunk needs offering again, or None."""
    if state.owner is not None:
        return None if state.owner in live else \
            f"is held by {state.owner}, whose heartbeat expired"
    if nothing_ready and state.created_at < waited_since:
        return "has waited unclaimed while nothing is ready in its queue (its message is " \
               "with a consumer that stopped before claiming it)"
    return None


async def _offer(chunks: ChunkRepository, bus: Bus, campaign: Campaign, state: ChunkState,
                 why: str) -> int:
    chunk = await chunks.get(state.campaign_id, state.seq)
    if chunk is None:
        return 0
    await bus.send_chunk(campaign.chunk_message(state.seq, chunk.recipients))
    log.warning("chunk %s:%d %s: offered to the live senders", state.campaign_id, state.seq, why)
    return 1
