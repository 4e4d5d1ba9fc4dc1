"""The cancel protocol's one owner: one decider, one finisher (docs/cancel-protocol.md).

Deciding (``_decide``, reached by ``request`` and ``stop_for_error``): a conditional status change
in MongoDB decides, once, what the cancel means; then a Redis flag (for pods that start later or
miss the broadcast) and a message on the ``herald.cancel`` fanout (for every live pod at once).
The api decides the cancels it is asked for. A pod that hears a broadcast asks the same question
without broadcasting again: for a cancel published by any AMQP tool nobody else decided, the
first pod to ask decides; for every other, the guarded transition has decided already and the pod
only stops and acknowledges.

Finishing (``finish``, the only code that writes ``cancelled``): each sender and dispatcher alive
at the decision acknowledges once it has stopped and recorded its in-flight work
(``acknowledge``); whoever records the last acknowledgement finishes. The decider reports too,
since a decision with nobody to wait for has seen its last acknowledgement already, and the
dispatchers' sweep finishes cancels whose last acknowledgement never comes (a pod died).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from herald.clock import utcnow
from herald.domain.access import Actor, ActorKind
from herald.domain.documents import Campaign, CancelRecord
from herald.domain.messages import CancelCampaign
from herald.domain.status import CancelDecision, Status, decide_cancel
from herald.observability import (
    CAMPAIGNS_FINISHED,
    CANCEL_LATENCY_SECONDS,
    CANCEL_SENT_RATIO,
)
from herald.service_layer.freezing import freeze_unpaged
from herald.service_layer.ports import Bus, CampaignRecords, CancelFlags, PodRegistry
from herald.service_layer.recipients import final_counts

log = logging.getLogger(__name__)

STOPPING_SERVICES = ("sender", "dispatcher")
"""Services whose pods must confirm they stopped before a campaign counts as cancelled."""

FLAG_REFRESH_S = 1.0
"""How often a sender re-reads the cancel flag of a campaign it works on (the fallback path)."""

MAX_RACE_RETRIES = 5
FINALIZER_LEASE = timedelta(seconds=30)
PAUSED_CANCEL_WAIT_S = 5.0
"""How long the cancel of a settled pause waits for a finisher that took the lease before it
(its answer is then 200 ``cancelled``, not 202)."""

FCM_REFUSED = Actor(id="herald:fcm", name="Herald (FCM refused the campaign)",
                    kind=ActorKind.SYSTEM)
"""Who stops a campaign that FCM refuses as misconfigured."""


class CampaignNotFound(LookupError):
    def __init__(self, campaign_id: str) -> None:
        super().__init__(f"no campaign {campaign_id}")
        self.campaign_id = campaign_id


class CannotCancel(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}; there is nothing left to cancel")
        self.status = status


@dataclass(frozen=True)
class CancelOutcome:
    decision: CancelDecision
    campaign: Campaign

    @property
    def status(self) -> Status:
        return self.campaign.status


class Spawn(Protocol):
    """Runs a coroutine in the background (the pod's ``Background.spawn``)."""

    def __call__(self, coroutine: Coroutine[Any, Any, None], name: str, /) -> None: ...


class Cancellation:
    """The cancel protocol: ``request``/``stop_for_error`` decide, pods ``acknowledge``,
    ``finish`` finishes.

    ``spawn`` runs the decider's report to the finisher in the background, so the API answers
    before the final counts are written; without it (a tool or test that runs no pod) a decision
    with nobody to wait for is finished by the sweep or the caller's own ``finish``.
    """

    def __init__(self, stores: CampaignRecords, flags: CancelFlags, pods: PodRegistry, bus: Bus | None,
                 pod_id: str, *, spawn: Spawn | None = None) -> None:
        self._stores = stores
        self._flags = flags
        self._pods = pods
        self._bus = bus
        self._pod_id = pod_id
        self._spawn = spawn

    async def request(self, campaign_id: str, reason: str | None, requested_by: Actor | None,
                      *, broadcast: bool, on_behalf_of: str | None = None) -> CancelOutcome:
        """Decide the cancel of ``campaign_id`` as ``requested_by`` (``broadcast``: tell every pod;
        False for a pod that heard the broadcast). Idempotent: once decided, the outcome is
        ``ALREADY`` and nothing is written. Raises ``CampaignNotFound`` or ``CannotCancel``."""
        for _ in range(MAX_RACE_RETRIES):
            campaign = await self._stores.campaigns.get(campaign_id)
            if campaign is None:
                raise CampaignNotFound(campaign_id)
            record = CancelRecord(requested_at=utcnow(), reason=reason,
                                  requested_by=requested_by, on_behalf_of=on_behalf_of)
            outcome = await self._decide(campaign, record, broadcast=broadcast)
            if outcome is not None:
                return outcome
        raise RuntimeError(f"campaign {campaign_id} kept changing status while being cancelled")

    async def stop_for_error(self, campaign_id: str, reason: str) -> Campaign | None:
        """Stop a campaign FCM refused as misconfigured (a payload, permission, credentials or
        project error: every recipient would get the same answer). It is a cancel decided by
        Herald (``FCM_REFUSED``), broadcast to every pod the same way, that ends ``failed``
        with ``reason`` instead of ``cancelled``. The campaign as it is now, or None if it was
        not sending any more (finished, or being cancelled already)."""
        record = CancelRecord(requested_at=utcnow(), reason=reason, requested_by=FCM_REFUSED,
                              fails_with=reason)
        return await self._begin_cancel(campaign_id, record, broadcast=True)

    async def _decide(self, campaign: Campaign, record: CancelRecord,
                      *, broadcast: bool) -> CancelOutcome | None:
        decision = decide_cancel(campaign.status)
        if decision is CancelDecision.REFUSE:
            raise CannotCancel(campaign.status)
        if decision is CancelDecision.ALREADY:
            return CancelOutcome(decision, campaign)
        if decision is CancelDecision.AT_ONCE:
            updated = await self._cancel_at_once(campaign.id, record)
        elif _settled_pause(campaign):
            updated = await self._cancel_paused(campaign.id, record, broadcast=broadcast)
        else:
            updated = await self._begin_cancel(campaign.id, record, broadcast=broadcast)
        return None if updated is None else CancelOutcome(decision, updated)

    async def _cancel_at_once(self, campaign_id: str, record: CancelRecord) -> Campaign | None:
        updated = await self._stores.campaigns.cancel_at_once(campaign_id, record)
        if updated is not None:
            await self._raise_flag(campaign_id)
            CAMPAIGNS_FINISHED.labels(Status.CANCELLED.value).inc()
            log.info("campaign %s cancelled before sending", campaign_id)
        return updated

    async def _begin_cancel(self, campaign_id: str, record: CancelRecord,
                            *, broadcast: bool, nothing_in_flight: bool = False,
                            report: bool = True) -> Campaign | None:
        expected = () if nothing_in_flight else await stopping_pods(self._pods)
        record = replace(record, expected_pods=expected)
        updated = await self._stores.campaigns.begin_cancel(campaign_id, record)
        if updated is None:
            return None
        await self._raise_flag(campaign_id)
        if broadcast and self._bus is not None:
            await self._broadcast(campaign_id, record)
        log.info("campaign %s cancelling; waiting for %s pods", campaign_id,
                 "unknown" if record.expected_pods is None else len(record.expected_pods))
        if report:
            self._report_decided(campaign_id)
        return updated

    async def _cancel_paused(self, campaign_id: str, record: CancelRecord,
                             *, broadcast: bool) -> Campaign | None:
        """A paused campaign whose pause settled has nothing in flight: nobody is waited for,
        and the cancel is finished here, before the caller is answered."""
        updated = await self._begin_cancel(campaign_id, record, broadcast=broadcast,
                                           nothing_in_flight=True, report=False)
        if updated is None:
            return None
        return await self.finish(campaign_id) or await self._finished_by_another(campaign_id)

    async def _finished_by_another(self, campaign_id: str) -> Campaign | None:
        """The campaign once the finisher that holds the lease (the dispatchers' sweep got
        there first) has written its counts, or as it is after ``PAUSED_CANCEL_WAIT_S``."""
        deadline = time.monotonic() + PAUSED_CANCEL_WAIT_S
        latest = await self._stores.campaigns.get(campaign_id)
        while (latest is not None and latest.status is Status.CANCELLING
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)
            latest = await self._stores.campaigns.get(campaign_id)
        return latest

    def _report_decided(self, campaign_id: str) -> None:
        """The decider's report to the finisher: with nobody to wait for (or only pods that
        died since), this was the last word; else ``finish`` finds pods still stopping."""
        if self._spawn is not None:
            self._spawn(self._finish_quietly(campaign_id), f"finish-cancel-{campaign_id}")

    async def _raise_flag(self, campaign_id: str) -> None:
        """The flag is for pods that miss the broadcast; MongoDB's status is the truth."""
        try:
            await self._flags.raise_flag(campaign_id)
        except Exception:  # best effort: the status in MongoDB is what stops pods for good
            log.warning("cancel flag of %s not raised (Redis away); the status still stops "
                        "pods that load the campaign", campaign_id)

    async def _broadcast(self, campaign_id: str, record: CancelRecord) -> None:
        """Tell every pod at once; if RabbitMQ is away, pods still see the flag within a second."""
        assert self._bus is not None
        try:
            await self._bus.broadcast_cancel(CancelCampaign(
                campaign_id=campaign_id, reason=record.reason,
                requested_by=record.requested_by.label if record.requested_by else None))
        except Exception:  # best effort: the flag reaches every pod within a second anyway
            log.warning("cancel broadcast of %s failed; pods will find the Redis flag",
                        campaign_id, exc_info=True)

    async def acknowledge(self, campaign_id: str, pod_id: str) -> None:
        """``pod_id`` stopped sending ``campaign_id`` and recorded what it had in flight; if it
        was the last to, the cancel is finished here."""
        await self._stores.campaigns.add_cancel_ack(campaign_id, pod_id)
        await self.finish(campaign_id)

    async def finish(self, campaign_id: str) -> Campaign | None:
        """The one finisher: ``cancelling → cancelled`` (or ``failed`` for ``stop_for_error``)
        with exact counts if no pod is still stopping; the finished campaign, else None.
        Called on an acknowledgement, on the decider's report, and by the dispatchers' sweep;
        a lease makes one caller write the final counts."""
        campaign = await self._stores.campaigns.get(campaign_id)
        if campaign is None or campaign.status is not Status.CANCELLING:
            return None
        if await self._still_stopping(campaign):
            return None
        now = utcnow()
        if not await self._stores.campaigns.claim_cancel_finalization(
                campaign_id, self._pod_id, now, now + FINALIZER_LEASE):
            return None  # another pod is writing the final counts
        frozen = await freeze_unpaged(self._stores, campaign)
        counts = (await final_counts(self._stores, frozen or campaign)).counts
        assert campaign.cancel is not None
        cancelled = await self._stores.campaigns.confirm_cancel(
            campaign_id, counts, utcnow(), error=campaign.cancel.fails_with)
        if cancelled is not None and cancelled.cancel is not None:
            _observe_cancelled(cancelled)
            log.info("campaign %s %s: %d of %d sent, %d failed", campaign_id,
                     cancelled.status.value, counts.sent, counts.targeted, counts.failed)
        return cancelled

    async def _finish_quietly(self, campaign_id: str) -> None:
        """``finish`` in the background: a failure is logged; the sweep retries."""
        try:
            await self.finish(campaign_id)
        except Exception:
            log.warning("finalizing cancel of %s failed; the sweep retries", campaign_id,
                        exc_info=True)

    async def _still_stopping(self, campaign: Campaign) -> list[str]:
        cancel = campaign.cancel
        assert cancel is not None
        return await still_stopping(self._pods, campaign.id, cancel.requested_at.timestamp(),
                                    cancel.expected_pods, cancel.acks)


async def still_stopping(pods: PodRegistry, campaign_id: str, requested_at_s: float,
                         expected_pods: tuple[str, ...] | None,
                         acks: tuple[str, ...]) -> list[str]:
    """Pods that may still send ``campaign_id`` after a stop (a cancel or a pause) requested at
    ``requested_at_s``: those alive at the request that neither acknowledged nor were seen idle
    since, and any live pod whose heartbeat says it works on the campaign."""
    live = {pod.id: pod for pod in await pods.live(STOPPING_SERVICES)}
    expected = list(live) if expected_pods is None else expected_pods
    idle_after_s = requested_at_s + FLAG_REFRESH_S
    waiting = [pod_id for pod_id in expected
               if pod_id not in acks and pod_id in live
               and not live[pod_id].seen_idle(campaign_id, idle_after_s)]
    busy_newcomers = [pod.id for pod in live.values()
                      if pod.id not in expected and campaign_id in pod.campaigns]
    return waiting + busy_newcomers


async def stopping_pods(pods: PodRegistry) -> tuple[str, ...] | None:
    """Senders and dispatchers alive now; None if Redis cannot tell (then every pod alive when
    the stop is finished must have stopped, see ``still_stopping``)."""
    try:
        return tuple(pod.id for pod in await pods.live(STOPPING_SERVICES))
    except Exception:  # best effort: waiting for every live pod is the safe fallback
        log.warning("live pods unknown (Redis away); waiting for their heartbeats")
        return None


def _settled_pause(campaign: Campaign) -> bool:
    pause = campaign.pause
    return (campaign.status is Status.PAUSED and pause is not None
            and pause.settled_at is not None)


def _observe_cancelled(cancelled: Campaign) -> None:
    assert cancelled.cancel is not None and cancelled.cancel.acknowledged_at is not None
    CAMPAIGNS_FINISHED.labels(cancelled.status.value).inc()
    latency = cancelled.cancel.acknowledged_at - cancelled.cancel.requested_at
    CANCEL_LATENCY_SECONDS.observe(latency.total_seconds())
    if cancelled.counts.targeted:
        CANCEL_SENT_RATIO.observe(cancelled.counts.sent / cancelled.counts.targeted)
