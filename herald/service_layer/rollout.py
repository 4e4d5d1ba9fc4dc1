"""A staged rollout's driver (docs/sending-safely.md): its ``recover(now)`` is the rollout's part
of the dispatchers' sweep.

Senders send each chunk's recipients of the waves opened so far and keep the chunk pending
(``wave_sent`` marks it); the driver, for each campaign sending in waves:

- counts a wave as sent once paging is over and every pending chunk says so; then the hold
  starts (``hold_until``), written before the gate looks, with the wave's own figures;
- at the end of the wave and during its hold, asks the gate (``domain/rollout.py``): above its
  threshold, the campaign is paused (the decider, kind ``gate``) with the reason and figures;
- when the hold is over, opens the next wave; once a wave is open, offers the kept chunks.

A resume during a hold, or of a campaign the gate halted, opens the next wave at once
(``after_resume``, the decider's hook); after a halt the gate judges only what is recorded from
the override on. Every write is conditional on the wave read, so several sweeps agree.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

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
    wave_share,
)
from herald.domain.status import PauseDecision, Status
from herald.service_layer.access import OperatorLog
from herald.service_layer.offers import offer_pending
from herald.service_layer.ports import Bus, CampaignRecords
from herald.service_layer.stopping import CannotPause, Decider

log = logging.getLogger(__name__)

ROLLOUT_GATE = Actor(id="herald:rollout-gate", name="Herald (the rollout's gate)",
                     kind=ActorKind.SYSTEM)
"""Who pauses a campaign whose gate tripped."""


class RolloutDriver:
    def __init__(self, stores: CampaignRecords, decider: Decider, bus: Bus,
                 operator_log: OperatorLog) -> None:
        self._stores = stores
        self._operator_log = operator_log
        self._decider = decider
        self._bus = bus

    async def recover(self, now: datetime) -> None:
        """One step of every campaign sending in waves."""
        for campaign in await self._stores.campaigns.with_rollout():
            if campaign.rollout is not None and campaign.rollout_progress is not None:
                await self.advance(campaign, now)

    async def advance(self, campaign: Campaign, now: datetime | None = None) -> None:
        rollout, progress = campaign.rollout, campaign.rollout_progress
        assert rollout is not None and progress is not None
        now = now or utcnow()
        if progress.offered_wave < progress.wave:
            await self._offer(campaign, progress)
            return
        if progress.wave >= rollout.last_wave:
            return  # the last wave completes the campaign as any campaign completes
        if progress.hold_until is None and not await self._wave_sent(campaign, progress.wave):
            return
        recorded = await self._recorded(campaign.id, None)
        judged = (gate_figures(await self._recorded(campaign.id, progress.judged_since))
                  if progress.judged_since is not None else gate_figures(recorded))
        if progress.hold_until is None:
            held = await self._hold(campaign, progress, recorded, judged, now)
            if held is None:
                return
            campaign, progress = held
        if trips(judged, rollout.halt_when):
            await self._halt(campaign, judged)
        elif progress.hold_until is not None and now >= progress.hold_until:
            await self.open_next_wave(campaign)

    async def _hold(self, campaign: Campaign, progress: RolloutProgress,
                    recorded: list[str | None], judged: GateFigures,
                    now: datetime) -> tuple[Campaign, RolloutProgress] | None:
        """The wave is sent: its hold starts, with its own figures, before the gate looks."""
        assert campaign.rollout is not None
        sent, failed = sent_and_failed(recorded)
        this_wave = wave_share(gate_figures(recorded), progress.wave_figures)
        held_progress = replace(
            progress, hold_until=now + timedelta(seconds=campaign.rollout.waves[progress.wave].hold_s),
            figures=judged, checked_at=now, sent=sent, failed=failed,
            wave_figures=(*progress.wave_figures, this_wave))
        held = await self._stores.campaigns.update_rollout(campaign.id, progress.wave,
                                                           held_progress)
        if held is None or held.rollout_progress is None:
            return None
        log.info("campaign %s: wave %d sent (%d failed of %d attempted); holding until %s",
                 campaign.id, progress.wave + 1, this_wave.failed, this_wave.attempted,
                 held_progress.hold_until.isoformat() if held_progress.hold_until else "-")
        return held, held.rollout_progress

    async def _wave_sent(self, campaign: Campaign, wave: int) -> bool:
        """Paging is over and every chunk still pending has sent its part of ``wave``."""
        if not campaign.dispatch.done:
            return False
        return all(state.wave_sent >= wave
                   for state in await self._stores.chunks.pending(campaign.id))

    async def open_next_wave(self, campaign: Campaign, *,
                             judged_since: datetime | None = None) -> Campaign | None:
        """Move from the wave held to the next (conditional on the wave read: of a resume and
        the sweep doing it at once, one does); None if there is no next wave or someone moved
        it first. Its kept chunks are offered at the next step."""
        rollout, progress = campaign.rollout, campaign.rollout_progress
        if rollout is None or progress is None or progress.wave >= rollout.last_wave:
            return None
        moved = replace(progress, wave=progress.wave + 1, hold_until=None, checked_at=utcnow(),
                        judged_since=judged_since or progress.judged_since)
        opened = await self._stores.campaigns.update_rollout(campaign.id, progress.wave, moved)
        if opened is not None:
            log.info("campaign %s: wave %d opened", campaign.id, moved.wave + 1)
        return opened

    async def after_resume(self, campaign: Campaign) -> Campaign:
        """The decider's hook on a resume: a campaign held between waves, or halted by its gate,
        goes on with its next wave at once; after a halt the gate judges only from now on."""
        progress, pause = campaign.rollout_progress, campaign.pause
        if campaign.status is not Status.IN_PROGRESS or progress is None:
            return campaign
        decision = campaign.decision
        halted = (pause is not None and pause.kind is PauseKind.GATE and decision is not None
                  and pause.resume_id == decision.id)
        if progress.hold_until is None and not halted:
            return campaign
        moved = await self.open_next_wave(campaign, judged_since=utcnow() if halted else None)
        return moved or campaign

    async def _offer(self, campaign: Campaign, progress: RolloutProgress) -> None:
        """Offer the open wave's kept chunks (once per wave: the write is conditional on it)."""
        marked = await self._stores.campaigns.update_rollout(
            campaign.id, progress.wave, replace(progress, offered_wave=progress.wave))
        if marked is not None:
            offered = await offer_pending(self._stores, self._bus, campaign)
            log.info("campaign %s: %d chunks offered for wave %d", campaign.id, offered,
                     progress.wave + 1)

    async def _halt(self, campaign: Campaign, figures: GateFigures) -> None:
        assert campaign.rollout is not None and campaign.rollout.halt_when is not None
        assert campaign.rollout_progress is not None
        reason = halt_reason(figures, campaign.rollout.halt_when, campaign.rollout_progress.wave)
        try:
            outcome = await self._decider.pause(campaign.id, reason, ROLLOUT_GATE,
                                                kind=PauseKind.GATE)
        except CannotPause:
            return  # cancelled or finished meanwhile
        if outcome.meaning is not PauseDecision.ALREADY:
            log.warning("campaign %s halted by its rollout's gate: %s", campaign.id, reason)
            await self._operator_log.record(
                actor=ROLLOUT_GATE, action="campaign.halt", status_code=202,
                target_kind="campaign", target_id=campaign.id, campaign_id=campaign.id,
                detail=reason)

    async def _recorded(self, campaign_id: str, since: datetime | None) -> list[str | None]:
        """Every outcome recorded (``since``: from then on), each recipient once (None: sent)."""
        by_chunk: dict[int, Recorded] = {}
        async for delivery in self._stores.deliveries.in_order(campaign_id):
            if since is None or delivery.at > since:
                delivery.add_to(by_chunk.setdefault(delivery.seq, {}))
        return [error for recorded in by_chunk.values() for error in recorded.values()]
