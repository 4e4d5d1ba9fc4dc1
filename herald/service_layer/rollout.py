"""A staged rollout's driver (docs/sending-safely.md), run by the dispatchers' sweep.

Senders send each chunk's recipients of the waves opened so far and keep the chunk pending
(``wave_sent`` marks it); the driver, for each campaign sending in waves:

- counts a wave as sent once paging is over and every pending chunk says so; then the hold
  starts (``hold_until``), and the gate's figures are written where the campaign's GET shows them;
- at the end of the wave and during its hold, asks the gate (``domain/rollout.py``): above its
  threshold, the campaign is paused (``Pausing.request``, kind ``gate``) with the reason;
- when the hold is over, opens the next wave and offers the pending chunks again.

A resume during a hold opens the next wave at once (``Pausing.resume``). Every write is
conditional on the wave read, so several dispatchers' sweeps agree.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from herald.clock import utcnow
from herald.domain.access import Actor, ActorKind
from herald.domain.documents import Campaign, PauseKind, Recorded
from herald.domain.rollout import (
    GateFigures,
    RolloutProgress,
    gate_figures,
    halt_reason,
    sent_and_failed,
    trips,
)
from herald.domain.status import PauseDecision, Status
from herald.service_layer.access import OperatorLog
from herald.service_layer.offers import offer_pending, open_next_wave
from herald.service_layer.pausing import CannotPause, Pausing
from herald.service_layer.ports import Bus, CampaignRecords

log = logging.getLogger(__name__)

ROLLOUT_GATE = Actor(id="herald:rollout-gate", name="Herald (the rollout's gate)",
                     kind=ActorKind.SYSTEM)
"""Who pauses a campaign whose gate tripped."""


class RolloutDriver:
    def __init__(self, stores: CampaignRecords, pausing: Pausing, bus: Bus,
                 operator_log: OperatorLog) -> None:
        self._stores = stores
        self._operator_log = operator_log
        self._pausing = pausing
        self._bus = bus

    async def advance_all(self) -> None:
        """One step of every campaign sending in waves."""
        for campaign in await self._stores.campaigns.with_status(Status.IN_PROGRESS):
            if campaign.rollout is not None and campaign.rollout_progress is not None:
                await self.advance(campaign)

    async def advance(self, campaign: Campaign) -> None:
        rollout, progress = campaign.rollout, campaign.rollout_progress
        assert rollout is not None and progress is not None
        if progress.wave >= rollout.last_wave:
            return  # the last wave completes the campaign as any campaign completes
        if progress.hold_until is None and not await self._wave_sent(campaign, progress.wave):
            return
        errors = await self._recorded(campaign.id)
        figures = gate_figures(errors)
        if trips(figures, rollout.halt_when):
            await self._halt(campaign, figures)
            return
        now = utcnow()
        if progress.hold_until is not None and now >= progress.hold_until:
            await self._next_wave(campaign)
            return
        sent, failed = sent_and_failed(errors)
        hold_until = progress.hold_until or now + timedelta(
            seconds=rollout.waves[progress.wave].hold_s)
        held = await self._stores.campaigns.update_rollout(campaign.id, progress.wave, RolloutProgress(
            wave=progress.wave, hold_until=hold_until, figures=figures, checked_at=now,
            sent=sent, failed=failed))
        if held is not None and progress.hold_until is None:
            log.info("campaign %s: wave %d sent (%d failed of %d attempted); holding until %s",
                     campaign.id, progress.wave + 1, figures.failed, figures.attempted,
                     hold_until.isoformat())

    async def _wave_sent(self, campaign: Campaign, wave: int) -> bool:
        """Paging is over and every chunk still pending has sent its part of ``wave``."""
        if not campaign.dispatch.done:
            return False
        return all(state.wave_sent >= wave
                   for state in await self._stores.chunks.pending(campaign.id))

    async def _next_wave(self, campaign: Campaign) -> None:
        moved = await open_next_wave(self._stores, campaign)
        if moved is not None and moved.rollout_progress is not None:
            offered = await offer_pending(self._stores, self._bus, moved)
            log.info("campaign %s: wave %d opened; %d pending chunks offered", campaign.id,
                     moved.rollout_progress.wave + 1, offered)

    async def _halt(self, campaign: Campaign, figures: GateFigures) -> None:
        assert campaign.rollout is not None and campaign.rollout.halt_when is not None
        assert campaign.rollout_progress is not None
        reason = halt_reason(figures, campaign.rollout.halt_when, campaign.rollout_progress.wave)
        try:
            outcome = await self._pausing.request(campaign.id, reason, ROLLOUT_GATE,
                                                  broadcast=True, kind=PauseKind.GATE)
        except CannotPause:
            return  # cancelled or finished meanwhile
        if outcome.decision is not PauseDecision.ALREADY:
            log.warning("campaign %s halted by its rollout's gate: %s", campaign.id, reason)
            await self._operator_log.record(
                actor=ROLLOUT_GATE, action="campaign.halt", status_code=202,
                target_kind="campaign", target_id=campaign.id, campaign_id=campaign.id,
                detail=reason)

    async def _recorded(self, campaign_id: str) -> list[str | None]:
        """Every outcome recorded so far, each recipient once (None: sent)."""
        by_chunk: dict[int, Recorded] = {}
        async for delivery in self._stores.deliveries.in_order(campaign_id):
            delivery.add_to(by_chunk.setdefault(delivery.seq, {}))
        return [error for recorded in by_chunk.values() for error in recorded.values()]
