"""The decider: cancel, pause, resume, and the stop for an FCM configuration error.

Each is a ``Decision`` (an id and a kind), written once: the guarded transition is conditional
on the campaign's status *and* on the decision it replaces, as read. Of a cancel and a resume
made at once, exactly one is written; the other reads again and decides on what it finds (a
cancel of a campaign that was resumed meanwhile waits for the pods that send it again). Then the
decision is told: a Redis flag for a cancel (pods that start later), and a broadcast on
``herald.cancel`` that names the decision, for every live pod at once (``verdict.py`` says what a
pod does with it). Telling is best effort: the store is the truth, and every pod reads it within
a second; a decision is never refused or undone because RabbitMQ or Redis is away.

A decision that waits for nobody (nothing was sending it: a cancel before it started, or of a
pause that settled) is settled before the caller is answered; any other is reported to the
settler in the background, which finds the pods that may still send it and waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from herald.clock import utcnow
from herald.domain.access import Actor, ActorKind
from herald.domain.documents import (
    Campaign,
    CancelRecord,
    Decision,
    DecisionKind,
    PauseKind,
    PauseRecord,
    new_id,
)
from herald.domain.messages import CancelCampaign
from herald.domain.status import (
    CancelDecision,
    PauseDecision,
    Status,
    decide_cancel,
    decide_pause,
)
from herald.observability import CAMPAIGNS_PAUSED, CAMPAIGNS_RESUMED
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import Bus, CampaignRecords, CancelFlags, PodRegistry
from herald.service_layer.stopping.pods import stopping_pods

log = logging.getLogger(__name__)

MAX_RACE_RETRIES = 5
OTHER_WRITER_WAIT_S = 2.0
"""How long a cancel with nothing in flight waits for another pod writing its final counts."""
OTHER_WRITER_POLL_S = 0.02

FCM_REFUSED = Actor(id="herald:fcm", name="Herald (FCM refused the campaign)",
                    kind=ActorKind.SYSTEM)
"""Who stops a campaign that FCM refuses as misconfigured."""


class CannotCancel(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; there is nothing left to cancel")
        self.status = status


class CannotPause(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a campaign that is sending "
                         "(in_progress) can be paused")
        self.status = status


class CannotResume(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; only a paused campaign can be resumed")
        self.status = status


Meaning = TypeVar("Meaning", CancelDecision, PauseDecision)


@dataclass(frozen=True)
class Decided(Generic[Meaning]):
    """What a request came to: what it meant (``ALREADY``: nothing was written) and the
    campaign afterwards (settled, if nobody had to be waited for)."""

    meaning: Meaning
    campaign: Campaign

    @property
    def status(self) -> Status:
        return self.campaign.status


class Spawn(Protocol):
    """Runs a coroutine in the background (the pod's ``Background.spawn``)."""

    def __call__(self, coroutine: Coroutine[Any, Any, None], name: str, /) -> None: ...


Settle = Callable[[str], Awaitable[Campaign | None]]
OnResume = Callable[[Campaign], Awaitable[Campaign]]
"""What a resume does to a staged rollout (open its next wave): ``rollout.py``."""


async def _nothing_more(campaign: Campaign) -> Campaign:
    return campaign


class Decider:
    """``cancel``, ``pause``, ``resume`` and ``stop_for_error`` decide; ``request`` decides
    what an outside AMQP tool asked for."""

    def __init__(self, stores: CampaignRecords, flags: CancelFlags, pods: PodRegistry,
                 bus: Bus | None, settle: Settle, *, spawn: Spawn | None = None) -> None:
        self._stores = stores
        self._flags = flags
        self._pods = pods
        self._bus = bus
        self._settle = settle
        self._spawn = spawn
        self._on_resume: OnResume = _nothing_more

    def on_resume(self, hook: OnResume) -> None:
        """What a resume does next for a staged rollout (``RolloutDriver.after_resume``)."""
        self._on_resume = hook

    # --- cancel and stop ------------------------------------------------------------------------
    async def cancel(self, campaign_id: str, reason: str | None, by: Actor | None, *,
                     on_behalf_of: str | None = None) -> Decided[CancelDecision]:
        """Cancel ``campaign_id``; idempotent (``ALREADY``: nothing written, nothing told).
        Raises ``CampaignNotFound`` or ``CannotCancel``."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._campaign(campaign_id)
            meaning = decide_cancel(campaign.status)
            if meaning is CancelDecision.REFUSE:
                raise CannotCancel(campaign.status)
            if meaning is CancelDecision.ALREADY:
                return Decided(meaning, campaign)
            record = CancelRecord(requested_at=utcnow(), reason=reason, requested_by=by,
                                  on_behalf_of=on_behalf_of)
            decided = await self._begin_cancel(campaign, record, DecisionKind.CANCEL)
            if decided is not None:
                return Decided(meaning, decided)
        raise RuntimeError(f"campaign {campaign_id} kept changing while being cancelled")

    async def stop_for_error(self, campaign_id: str, reason: str) -> Campaign | None:
        """Stop a campaign FCM refused as misconfigured (a payload, permission, credentials or
        project error: every recipient would get the same answer): a cancel decided by Herald
        (``FCM_REFUSED``) that ends ``failed`` with ``reason``. The campaign afterwards, or
        None if it was not sending any more (finished, or being cancelled already)."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._campaign(campaign_id)
            if decide_cancel(campaign.status) is not CancelDecision.STOP_PODS:
                return None
            record = CancelRecord(requested_at=utcnow(), reason=reason,
                                  requested_by=FCM_REFUSED, fails_with=reason)
            decided = await self._begin_cancel(campaign, record, DecisionKind.STOP)
            if decided is not None:
                return decided
        return None

    async def _begin_cancel(self, campaign: Campaign, record: CancelRecord,
                            kind: DecisionKind) -> Campaign | None:
        nobody = _nothing_in_flight(campaign)
        decision = Decision(id=new_id(), kind=kind, at=record.requested_at)
        record = replace(record, decision_id=decision.id, nothing_in_flight=nobody,
                         expected_pods=() if nobody else await stopping_pods(self._pods))
        begun = await self._stores.campaigns.begin_cancel(campaign.id, record, decision,
                                                          after=campaign.decision,
                                                          status=campaign.status)
        if begun is None:
            return None
        await self._raise_flag(campaign.id)
        await self._tell(begun, decision, campaign.decision, record.reason, record.requested_by)
        log.info("campaign %s cancelling (%s); waiting for %s pods", campaign.id, kind.value,
                 "unknown" if record.expected_pods is None else len(record.expected_pods))
        return await self._settled_or_reported(begun, nobody)

    # --- pause and resume -----------------------------------------------------------------------
    async def pause(self, campaign_id: str, reason: str | None, by: Actor | None, *,
                    kind: PauseKind = PauseKind.MANUAL) -> Decided[PauseDecision]:
        """Pause ``campaign_id``; idempotent (``ALREADY``: nothing written). Raises
        ``CampaignNotFound`` or ``CannotPause``."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._campaign(campaign_id)
            meaning = decide_pause(campaign.status)
            if meaning is PauseDecision.REFUSE:
                raise CannotPause(campaign.status)
            if meaning is PauseDecision.ALREADY:
                return Decided(meaning, campaign)
            now = utcnow()
            decision = Decision(id=new_id(), kind=DecisionKind.PAUSE, at=now)
            record = PauseRecord(pause_id=decision.id, requested_at=now, reason=reason,
                                 requested_by=by, kind=kind,
                                 expected_pods=await stopping_pods(self._pods))
            paused = await self._stores.campaigns.begin_pause(campaign_id, record, decision,
                                                              after=campaign.decision)
            if paused is not None:
                CAMPAIGNS_PAUSED.labels(kind.value).inc()
                await self._tell(paused, decision, campaign.decision, reason, by)
                log.info("campaign %s paused (%s): %s; waiting for %s pods", campaign_id,
                         kind.value, reason, "unknown" if record.expected_pods is None
                         else len(record.expected_pods))
                return Decided(meaning, await self._settled_or_reported(paused, False))
        raise RuntimeError(f"campaign {campaign_id} kept changing while being paused")

    async def resume(self, campaign_id: str, by: Actor | None) -> Campaign:
        """``paused → in_progress``; a staged rollout's next wave starts at once (a resume
        during its hold, or of one its gate halted). The store is all a resume changes: pods
        read it within a second (the broadcast only makes it sooner), and the dispatchers'
        sweep offers the kept chunks again. Raises ``CampaignNotFound`` or ``CannotResume``."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._campaign(campaign_id)
            if campaign.status is not Status.PAUSED:
                return await self._on_resume(_holding_or_refused(campaign))
            decision = Decision(id=new_id(), kind=DecisionKind.RESUME, at=utcnow())
            resumed = await self._stores.campaigns.resume(campaign_id, by, decision,
                                                          after=campaign.decision)
            if resumed is not None:
                CAMPAIGNS_RESUMED.inc()
                await self._tell(resumed, decision, campaign.decision, None, by)
                log.info("campaign %s resumed", campaign_id)
                # its last chunk may have closed while it was paused: the settler completes it
                moved = await self._on_resume(resumed)
                return await self._settle(campaign_id) or moved
        raise RuntimeError(f"campaign {campaign_id} kept changing while being resumed")

    # --- a request from outside -----------------------------------------------------------------
    async def request(self, command: CancelCampaign, by: Actor) -> Decided[Any]:
        """What an AMQP tool published to ``herald.cancel`` without a decision: a cancel or a
        pause, decided as the API would (a resume is the API's alone: ``CannotResume``)."""
        if command.action == "pause":
            return await self.pause(command.campaign_id, command.reason, by)
        if command.action == "resume":
            raise CannotResume(Status.PAUSED)
        return await self.cancel(command.campaign_id, command.reason, by)

    # --- telling --------------------------------------------------------------------------------
    async def _campaign(self, campaign_id: str) -> Campaign:
        campaign = await self._stores.campaigns.get(campaign_id)
        if campaign is None:
            raise CampaignNotFound(campaign_id)
        return campaign

    async def _settled_or_reported(self, campaign: Campaign, nobody: bool) -> Campaign:
        """Settled now when nobody was sending it; else reported to the settler in the
        background (the API answers before the final counts are written)."""
        if nobody:
            return await self._settle(campaign.id) or await self._written_by_another(campaign)
        if self._spawn is not None:
            self._spawn(self._settle_quietly(campaign.id), f"settle-{campaign.id}")
        return campaign

    async def _latest(self, campaign: Campaign) -> Campaign:
        return await self._stores.campaigns.get(campaign.id) or campaign

    async def _written_by_another(self, campaign: Campaign) -> Campaign:
        """The campaign once the pod that holds its finalization lease (a sweep that came upon
        it at the same moment) wrote its end: nothing was in flight, so that is a matter of
        milliseconds; after ``OTHER_WRITER_WAIT_S`` it is answered as it stands."""
        deadline = time.monotonic() + OTHER_WRITER_WAIT_S
        latest = await self._latest(campaign)
        while latest.status is Status.CANCELLING and time.monotonic() < deadline:
            await asyncio.sleep(OTHER_WRITER_POLL_S)
            latest = await self._latest(campaign)
        return latest

    async def _settle_quietly(self, campaign_id: str) -> None:
        try:
            await self._settle(campaign_id)
        except Exception:  # the sweep settles it
            log.warning("settling %s failed; the sweep tries again", campaign_id, exc_info=True)

    async def _raise_flag(self, campaign_id: str) -> None:
        """The flag is for pods that miss the broadcast; MongoDB's status is the truth."""
        try:
            await self._flags.raise_flag(campaign_id)
        except Exception:  # best effort: the status in MongoDB stops pods that read it
            log.warning("cancel flag of %s not raised (Redis away); pods read the status",
                        campaign_id)

    async def _tell(self, campaign: Campaign, decision: Decision, replaced: Decision | None,
                    reason: str | None, by: Actor | None) -> None:
        """Tell every pod at once, naming the decision and the one it replaced; if RabbitMQ is
        away, pods read the store within a second."""
        if self._bus is None:
            return
        try:
            await self._bus.broadcast_cancel(CancelCampaign(
                campaign_id=campaign.id, reason=reason, requested_by=by.label if by else None,
                action=_ACTIONS[decision.kind], decision_id=decision.id,
                replaces=replaced.id if replaced else None))
        except Exception:  # best effort
            log.warning("%s broadcast of %s failed; pods read the store", decision.kind.value,
                        campaign.id, exc_info=True)


_ACTIONS = {DecisionKind.CANCEL: "cancel", DecisionKind.STOP: "cancel",
            DecisionKind.PAUSE: "pause", DecisionKind.RESUME: "resume"}


def _nothing_in_flight(campaign: Campaign) -> bool:
    """Nothing can be sending it: not started yet, or paused with the pause settled."""
    if decide_cancel(campaign.status) is CancelDecision.AT_ONCE:
        return True
    pause = campaign.pause
    return campaign.status is Status.PAUSED and pause is not None and pause.settled_at is not None


def _holding_or_refused(campaign: Campaign) -> Campaign:
    """A resume of a campaign that is not paused only ends a staged rollout's hold."""
    progress = campaign.rollout_progress
    if campaign.status is Status.IN_PROGRESS and progress is not None and \
            progress.hold_until is not None:
        return campaign
    raise CannotResume(campaign.status)
