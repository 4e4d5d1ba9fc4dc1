"""Composition root of the dispatcher: claims campaigns and pages them into chunks.

Work arrives two ways: a ``herald.dispatch`` message (the fast path, right after a campaign is
created or fired), and a periodic sweep of MongoDB that
- claims pending campaigns nobody announced;
- takes over campaigns whose dispatcher died: at once when its heartbeat is gone, or when its
  lease runs out (a lease is renewed every third of its length while paging);
- finishes cancels (and settles pauses) whose pods died before acknowledging;
- moves staged rollouts on: holds a sent wave, asks the gate, opens the next wave;
- finishes campaigns whose last chunk was closed but never counted.
Paging that fails (RabbitMQ or MongoDB away) is resumed from the checkpoint while the lease is
still this dispatcher's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from faststream.rabbit.annotations import RabbitMessage

from herald.adapters import rabbit
from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.messages import DispatchCampaign
from herald.domain.status import Status
from herald.runtime.tasks import Background
from herald.runtime.tracking import WorkTracker
from herald.runtime.worker import PodParts, Worker
from herald.service_layer.access import OperatorLog
from herald.service_layer.cancellation import Cancellation
from herald.service_layer.completion import complete, reconcile
from herald.service_layer.pausing import Pausing
from herald.service_layer.ports import Bus, CampaignRecords, PodRegistry
from herald.service_layer.rollout import RolloutDriver
from herald.service_layer.sending.rescue import rescue_chunks_of_dead_senders
from services.dispatcher.backpressure import Backpressure
from services.dispatcher.paging import Paging

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 1.0
RECONCILE_EVERY_SWEEPS = 10


@dataclass(frozen=True)
class DispatchPolicy:
    pod_id: str
    lease_s: float
    sweep_interval_s: float
    grace_period_s: float
    heartbeat_ttl_s: float = 6.0
    max_campaigns: int = 256
    """Campaigns this dispatcher pages at once from its sweep (an announced campaign, urgent
    ones included, is always taken)."""


class Dispatcher(Worker):
    def __init__(self, stores: CampaignRecords, registry: PodRegistry, cancellation: Cancellation,
                 pausing: Pausing, rollouts: RolloutDriver, tracker: WorkTracker,
                 background: Background, paging: Paging, policy: DispatchPolicy,
                 stopping: asyncio.Event, bus: Bus) -> None:
        self._stores = stores
        self._bus = bus
        self._rescued_at = 0.0
        self._registry = registry
        self._cancellation = cancellation
        self._pausing = pausing
        self._rollouts = rollouts
        self._tracker = tracker
        self._background = background
        self._paging = paging
        self._policy = policy
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopping = stopping
        self._sweeps = 0

    async def start(self) -> None:
        self._background.spawn(self._sweep_loop(), "sweep")
        self._background.spawn(self._renew_leases(), "leases")

    async def stop(self) -> None:
        """Stop paging at the next chunk boundary and give the leases up."""
        self._stopping.set()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=self._policy.grace_period_s)

    async def on_dispatch(self, message: RabbitMessage) -> None:
        await rabbit.execute(message, DispatchCampaign, self._claim_announced)

    async def _claim_announced(self, command: DispatchCampaign) -> None:
        await self._claim(command.campaign_id)

    def _lease_until(self) -> datetime:
        return utcnow() + timedelta(seconds=self._policy.lease_s)

    async def _claim(self, campaign_id: str | None) -> bool:
        """Claim one campaign (that one, or any claimable) and start paging it."""
        if self._stopping.is_set() or campaign_id in self._running:
            return False
        campaign = await self._stores.campaigns.claim_for_dispatch(
            campaign_id, self._policy.pod_id, utcnow(), self._lease_until())
        if campaign is None:
            return False
        self._start_paging(campaign)
        return True

    def _start_paging(self, campaign: Campaign) -> None:
        if campaign.id in self._running:
            return  # this dispatcher re-claimed its own campaign (its lease lapsed): one is enough
        log.info("claimed %s (%s)", campaign.id,
                 "takeover" if campaign.dispatch.takeovers else "new")
        self._running[campaign.id] = asyncio.create_task(self._page(campaign), name=campaign.id)

    async def _page(self, campaign: Campaign) -> None:
        campaign_id = campaign.id
        current: Campaign | None = campaign
        try:
            async with self._tracker.working_on(campaign_id):
                while current is not None and not self._stopping.is_set():
                    try:
                        await self._paging.run(current)
                        return
                    except Exception:
                        log.exception("paging %s failed; resuming from its checkpoint", campaign_id)
                        await asyncio.sleep(RETRY_PAUSE_S)
                        current = await self._still_mine_or_none(campaign_id)
        finally:
            self._running.pop(campaign_id, None)

    async def _still_mine_or_none(self, campaign_id: str) -> Campaign | None:
        """The campaign, if this dispatcher still holds its lease (renewed); None if it lost it
        or cannot tell (an outage): the lease then expires and any dispatcher resumes."""
        try:
            if await self._stores.campaigns.renew_lease(campaign_id, self._policy.pod_id,
                                                        self._lease_until()):
                return await self._stores.campaigns.get(campaign_id)
        except Exception:
            log.warning("cannot tell whether %s is still ours; leaving it to its lease",
                        campaign_id, exc_info=True)
        return None

    async def _renew_leases(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self._policy.lease_s / 3)
            for campaign_id in list(self._running):
                try:
                    await self._stores.campaigns.renew_lease(campaign_id, self._policy.pod_id,
                                                             self._lease_until())
                except Exception:
                    log.warning("renewing the lease of %s failed", campaign_id, exc_info=True)

    async def _sweep_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._sweep()
            except Exception:
                log.warning("sweep failed; retrying", exc_info=True)
            await asyncio.sleep(self._policy.sweep_interval_s)

    async def _sweep(self) -> None:
        while len(self._running) < self._policy.max_campaigns and await self._claim(None):
            pass
        await self._take_over_from_dead_dispatchers()
        await self._rescue_chunks_of_dead_senders()
        for campaign in await self._stores.campaigns.with_status(Status.CANCELLING):
            await self._cancellation.finish(campaign.id)
        for campaign in await self._stores.campaigns.with_status(Status.PAUSED):
            if campaign.pause is not None and campaign.pause.settled_at is None:
                await self._pausing.settle(campaign.id)
        await self._rollouts.advance_all()
        self._sweeps += 1
        if self._sweeps % RECONCILE_EVERY_SWEEPS == 0:
            await self._finish_interrupted()

    async def _rescue_chunks_of_dead_senders(self) -> None:
        """At most twice per heartbeat TTL: chunks a stopped sender holds are taken over within
        its heartbeat's life and one sweep, not when RabbitMQ drops its connection."""
        now = time.monotonic()
        if now - self._rescued_at < self._policy.heartbeat_ttl_s / 2:
            return
        self._rescued_at = now
        await rescue_chunks_of_dead_senders(
            self._stores.campaigns, self._stores.chunks, self._registry, self._bus, utcnow(),
            offer_again_after=timedelta(seconds=2 * self._policy.heartbeat_ttl_s))

    async def _finish_interrupted(self) -> None:
        """Campaigns whose finishing a dead pod (or an outage) interrupted."""
        for campaign in await self._stores.campaigns.paged_and_open():
            await reconcile(self._stores, campaign)
        stale = utcnow() - timedelta(seconds=self._policy.lease_s)
        for campaign in await self._stores.campaigns.stuck_finalizing(stale):
            log.warning("campaign %s was left finalizing; finishing it", campaign.id)
            await complete(self._stores, campaign)

    async def _take_over_from_dead_dispatchers(self) -> None:
        live = {pod.id for pod in await self._registry.live(("dispatcher",))}
        for campaign in await self._stores.campaigns.paging():
            owner = campaign.dispatch.owner
            if (owner is None or owner in live or self._stopping.is_set()
                    or len(self._running) >= self._policy.max_campaigns):
                continue
            taken = await self._stores.campaigns.take_over(campaign.id, owner,
                                                           self._policy.pod_id,
                                                           self._lease_until())
            if taken is not None:
                log.warning("dispatcher %s is gone (no heartbeat); taking %s over", owner,
                            taken.id)
                self._start_paging(taken)


def compose(parts: PodParts) -> Dispatcher:
    settings, resources, pod_id = parts.settings, parts.resources, parts.identity.id
    policy = DispatchPolicy(pod_id=pod_id, lease_s=settings.lease_s,
                            sweep_interval_s=settings.sweep_interval_s,
                            grace_period_s=settings.grace_period_s,
                            heartbeat_ttl_s=settings.heartbeat_ttl_s,
                            max_campaigns=settings.dispatch_max_campaigns)
    stopping = asyncio.Event()
    backpressure = Backpressure(resources.bus.chunks_ready, settings.dispatch_max_queued_chunks)
    paging = Paging(resources.stores, resources.bus.send_chunk, parts.watch.is_cancelled,
                    stopping.is_set, pod_id, settings.lease_s, backpressure,
                    is_paused=parts.watch.is_paused,
                    campaign_window=settings.dispatch_campaign_window)
    rollouts = RolloutDriver(resources.stores, parts.pausing, resources.bus,
                             OperatorLog(resources.stores.operator_log))
    dispatcher = Dispatcher(resources.stores, resources.registry, parts.cancellation,
                            parts.pausing, rollouts, parts.tracker, parts.background, paging,
                            policy, stopping, resources.bus)
    rabbit.consume(resources.broker, rabbit.DISPATCH_QUEUE, dispatcher.on_dispatch,
                   prefetch=settings.dispatcher_prefetch)
    return dispatcher
