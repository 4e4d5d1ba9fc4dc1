"""The pause protocol's one owner (docs/sending-safely.md): it shares the cancel's machinery,
so a pause is as fast as a cancel and means as much.

- **Decide** (``request``): the guarded ``in_progress → paused`` transition decides once, with
  the senders and dispatchers alive then as the pods to wait for; the decider broadcasts on
  ``herald.cancel`` (``action: pause``). A pod that hears a pause nobody decided (an AMQP tool
  published it) asks the same question without broadcasting: the first decides.
- **Stop and acknowledge**: each pod marks the campaign in its ``CancelWatch`` (the sender's check
  before every FCM request and every retry stops there), records what it has in flight, keeps
  the chunks it has not finished (pending in MongoDB, its claim given back, the message
  acknowledged) and, once idle, acknowledges (``acknowledge``).
- **Settle** (``settle``, the one finisher): on the last acknowledgement (or the decider's report,
  or the dispatchers' sweep when a pod died), the counts so far are written from the records:
  from then on ``paused`` means nothing is in flight.
- **Resume** (``resume``, decided by the api alone): ``paused → in_progress``, a broadcast that
  tells pods to read the status again, every pending chunk offered again (a sender skips what
  was recorded), the dispatcher woken if paging was not over, and the campaign finished if its
  last chunk closed during the pause.

A pause lives in MongoDB (status and ``pause`` record): a pod that restarts, or missed the
broadcast, finds it in the campaign's status (``sending/campaigns.py`` re-reads it every
``STATUS_REFRESH_S`` while it sends), and the sweep never re-offers a paused campaign's chunks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from herald.clock import utcnow
from herald.domain.access import Actor
from herald.domain.documents import Campaign, PauseKind, PauseRecord, new_id
from herald.domain.messages import CancelCampaign
from herald.domain.status import PauseDecision, Status, decide_pause
from herald.observability import CAMPAIGNS_PAUSED, CAMPAIGNS_RESUMED
from herald.service_layer.cancellation import (
    MAX_RACE_RETRIES,
    CampaignNotFound,
    Spawn,
    still_stopping,
    stopping_pods,
)
from herald.service_layer.completion import reconcile
from herald.service_layer.offers import offer_pending, open_next_wave
from herald.service_layer.ports import Bus, CampaignRecords, PodRegistry
from herald.service_layer.recipients import final_counts

log = logging.getLogger(__name__)


class CannotPause(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a campaign that is sending "
                         "(in_progress) can be paused")
        self.status = status


class CannotResume(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a paused campaign can be resumed")
        self.status = status


@dataclass(frozen=True)
class PauseOutcome:
    decision: PauseDecision
    campaign: Campaign


class Pausing:
    """``request`` decides, pods ``acknowledge``, ``settle`` finishes; ``resume`` undoes."""

    def __init__(self, stores: CampaignRecords, pods: PodRegistry, bus: Bus | None, pod_id: str,
                 *, spawn: Spawn | None = None) -> None:
        self._stores = stores
        self._pods = pods
        self._bus = bus
        self._pod_id = pod_id
        self._spawn = spawn

    async def request(self, campaign_id: str, reason: str | None, requested_by: Actor | None,
                      *, broadcast: bool, kind: PauseKind = PauseKind.MANUAL) -> PauseOutcome:
        """Decide the pause of ``campaign_id``; idempotent (``ALREADY``: nothing written).
        Raises ``CampaignNotFound`` or ``CannotPause``."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._stores.campaigns.get(campaign_id)
            if campaign is None:
                raise CampaignNotFound(campaign_id)
            decision = decide_pause(campaign.status)
            if decision is PauseDecision.REFUSE:
                raise CannotPause(campaign.status)
            if decision is PauseDecision.ALREADY:
                return PauseOutcome(decision, campaign)
            record = PauseRecord(pause_id=new_id(), requested_at=utcnow(), reason=reason,
                                 requested_by=requested_by, kind=kind,
                                 expected_pods=await stopping_pods(self._pods))
            paused = await self._stores.campaigns.begin_pause(campaign_id, record)
            if paused is not None:
                await self._decided(paused, record, broadcast=broadcast)
                return PauseOutcome(decision, paused)
        raise RuntimeError(f"campaign {campaign_id} kept changing status while being paused")

    async def _decided(self, paused: Campaign, record: PauseRecord, *, broadcast: bool) -> None:
        CAMPAIGNS_PAUSED.labels(record.kind.value).inc()
        if broadcast:
            await self._tell_pods(paused.id, "pause", record.reason,
                                  record.requested_by.label if record.requested_by else None)
        log.info("campaign %s paused (%s): %s; waiting for %s pods", paused.id, record.kind.value,
                 record.reason, "unknown" if record.expected_pods is None
                 else len(record.expected_pods))
        if self._spawn is not None:
            self._spawn(self._settle_quietly(paused.id), f"settle-pause-{paused.id}")

    async def _tell_pods(self, campaign_id: str, action: str, reason: str | None,
                         requested_by: str | None) -> None:
        """Best effort, as for a cancel: a pod that misses it reads the status within
        ``STATUS_REFRESH_S`` while it sends, and at once when it takes a chunk."""
        if self._bus is None:
            return
        try:
            await self._bus.broadcast_cancel(CancelCampaign.model_validate({
                "campaign_id": campaign_id, "reason": reason, "requested_by": requested_by,
                "action": action}))
        except Exception:
            log.warning("%s broadcast of %s failed; pods will read the status", action,
                        campaign_id, exc_info=True)

    async def campaign(self, campaign_id: str) -> Campaign | None:
        """The campaign as stored (a pod told of a resume reads its status again)."""
        return await self._stores.campaigns.get(campaign_id)

    async def acknowledge(self, campaign_id: str, pause_id: str, pod_id: str) -> None:
        """``pod_id`` has nothing of the campaign in flight any more; if it was the last, the
        pause is settled here."""
        await self._stores.campaigns.add_pause_ack(campaign_id, pause_id, pod_id)
        await self.settle(campaign_id)

    async def settle(self, campaign_id: str) -> Campaign | None:
        """The one finisher: the pause settled with the exact counts so far, once no pod may
        still send; the settled campaign, else None (not paused, settled already, or pods are
        still stopping)."""
        campaign = await self._stores.campaigns.get(campaign_id)
        if campaign is None or campaign.status is not Status.PAUSED:
            return None
        pause = campaign.pause
        if pause is None or pause.settled_at is not None:
            return None
        if await still_stopping(self._pods, campaign_id, pause.requested_at.timestamp(),
                                pause.expected_pods, pause.acks):
            return None
        counts = (await final_counts(self._stores, campaign)).counts
        settled = await self._stores.campaigns.settle_pause(campaign_id, pause.pause_id, counts,
                                                            utcnow())
        if settled is not None:
            log.info("campaign %s paused with nothing in flight: %d sent, %d failed of %d "
                     "targeted so far", campaign_id, counts.sent, counts.failed, counts.targeted)
        return settled

    async def _settle_quietly(self, campaign_id: str) -> None:
        try:
            await self.settle(campaign_id)
        except Exception:
            log.warning("settling the pause of %s failed; the sweep retries", campaign_id,
                        exc_info=True)

    async def resume(self, campaign_id: str, by: Actor | None) -> Campaign:
        """``paused → in_progress``, then the rest offered again; during a staged rollout's
        hold (paused or not), its next wave starts at once. Raises ``CampaignNotFound`` or
        ``CannotResume``."""
        resumed = await self._stores.campaigns.resume(campaign_id, by, utcnow())
        if resumed is None:
            return await self._end_hold(campaign_id)
        CAMPAIGNS_RESUMED.inc()
        if _holding(resumed):
            resumed = await open_next_wave(self._stores, resumed) or resumed
        await self._tell_pods(campaign_id, "resume", None, by.label if by else None)
        offered = await self._offer_again(resumed)
        log.info("campaign %s resumed: %d pending chunks offered again", campaign_id, offered)
        return await self._stores.campaigns.get(campaign_id) or resumed

    async def _end_hold(self, campaign_id: str) -> Campaign:
        """A resume of a campaign that is not paused: it ends a staged rollout's hold (the
        next wave starts at once), or is refused."""
        current = await self._stores.campaigns.get(campaign_id)
        if current is None:
            raise CampaignNotFound(campaign_id)
        if current.status is not Status.IN_PROGRESS or not _holding(current):
            raise CannotResume(current.status)
        moved = await open_next_wave(self._stores, current)
        if moved is None:
            raise CannotResume(current.status)
        offered = await self._offer_again(moved)
        log.info("campaign %s: hold ended by a resume; %d pending chunks offered", campaign_id,
                 offered)
        return moved

    async def _offer_again(self, resumed: Campaign) -> int:
        """Every chunk not closed is published again (``offer_pending``); paging goes on
        where it stopped; a campaign whose last chunk closed while it was paused is
        finished."""
        offered = 0
        if self._bus is not None:
            offered = await offer_pending(self._stores, self._bus, resumed)
            if not resumed.dispatch.done:
                await self._bus.request_dispatch(resumed.id)
        if resumed.dispatch.done:
            await reconcile(self._stores, resumed)
        return offered


def _holding(campaign: Campaign) -> bool:
    """In a staged rollout's hold: its current wave is sent, the next not started."""
    progress = campaign.rollout_progress
    return progress is not None and progress.hold_until is not None
