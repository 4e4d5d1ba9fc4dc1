"""Composition root of the dispatcher: claims campaigns and pages them into chunks.

Work arrives two ways: a ``herald.dispatch`` message (the fast path, right after a campaign is
created or fired), and a periodic sweep of MongoDB. The sweep is a list of each protocol's
``recover(now)``, in order:
- paging (this module): claims pending campaigns nobody announced, urgent ones first, and takes
  over campaigns whose dispatcher died (at once when its heartbeat is gone, or when its lease
  runs out; a lease is renewed every third of its length while paging);
- the rescue (``sending/rescue.py``): chunks held by a sender whose heartbeat expired;
- the settler (``stopping/settle.py``): cancels and pauses whose pods died before
  acknowledging, campaigns whose last chunk closed but was never counted;
- staged rollouts (``rollout.py``): a sent wave held, the gate asked, the next wave opened;
- resumes (``offers.py``): a resumed campaign's kept chunks offered again.
Paging that fails (RabbitMQ or MongoDB away) is resumed from the checkpoint while the lease is
still this dispatcher's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from faststream.rabbit.annotations import RabbitMessage

from herald.adapters import rabbit
from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.messages import DispatchCampaign
from herald.runtime.rules import quiet_window
from herald.runtime.tasks import Background
from herald.runtime.tracking import WorkTracker
from herald.runtime.worker import PodParts, Worker
from herald.service_layer.offers import ResumeOffers
from herald.service_layer.ports import CampaignRecords, PodRegistry
from herald.service_layer.sending.rescue import ChunkRescue
from services.dispatcher.backpressure import Backpressure
from services.dispatcher.paging import Paging

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 1.0
RETRY_PAUSE_MAX_S = 30.0
"""A paging that keeps failing is retried after 1 s, 2 s, 4 s... up to this: a read that
fails because the database is overloaded is not sent again at once (issue 33: a resume whose
read timed out, retried every second, held nx-27017 and the whole api for 6.7 minutes)."""


def retry_pause_s(failures: int) -> float:
    """How long to wait before retrying after ``failures`` failures in a row (1 or more)."""
    return float(min(RETRY_PAUSE_MAX_S, RETRY_PAUSE_S * 2 ** min(failures - 1, 16)))

Recover = Callable[[datetime], Awaitable[object]]
"""A protocol's part of the sweep."""


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
    def __init__(self, stores: CampaignRecords, registry: PodRegistry, tracker: WorkTracker,
                 background: Background, paging: Paging, policy: DispatchPolicy,
                 stopping: asyncio.Event, recoveries: Sequence[Recover] = ()) -> None:
        self._stores = stores
        self._registry = registry
        self._recoveries = (self.recover, *recoveries)
        self._tracker = tracker
        self._background = background
        self._paging = paging
        self._policy = policy
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopping = stopping

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
        failures = 0
        try:
            async with self._tracker.working_on(campaign_id):
                while current is not None and not self._stopping.is_set():
                    try:
                        await self._paging.run(current)
                        return
                    except Exception:
                        failures += 1
                        pause_s = retry_pause_s(failures)
                        log.exception("paging %s failed (%d in a row); resuming from its "
                                      "checkpoint in %.0f s", campaign_id, failures, pause_s)
                        await asyncio.sleep(pause_s)
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
        for recover in self._recoveries:
            await recover(utcnow())

    async def recover(self, _now: datetime) -> None:
        """Paging's part of the sweep: claim what nobody announced, take over what a dead
        dispatcher held."""
        while len(self._running) < self._policy.max_campaigns and await self._claim(None):
            pass
        await self._take_over_from_dead_dispatchers()

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
    quiet = quiet_window(settings)  # first: one it cannot read ends the start
    policy = DispatchPolicy(pod_id=pod_id, lease_s=settings.lease_s,
                            sweep_interval_s=settings.sweep_interval_s,
                            grace_period_s=settings.grace_period_s,
                            heartbeat_ttl_s=settings.heartbeat_ttl_s,
                            max_campaigns=settings.dispatch_max_campaigns)
    stopping = asyncio.Event()
    backpressure = Backpressure(resources.bus.chunks_ready, settings.dispatch_max_queued_chunks)
    paging = Paging(resources.stores, resources.bus.send_chunk, parts.view.verdict,
                    stopping.is_set, pod_id, settings.lease_s, backpressure,
                    campaign_window=settings.dispatch_campaign_window,
                    settled=parts.settler.settled, quiet_setting=quiet)
    stores = resources.stores
    rescue = ChunkRescue(stores.campaigns, stores.chunks, resources.registry, resources.bus,
                         settings.heartbeat_ttl_s)
    dispatcher = Dispatcher(stores, resources.registry, parts.tracker, parts.background, paging,
                            policy, stopping,
                            recoveries=(rescue.recover, parts.settler.recover,
                                        parts.rollouts.recover,
                                        ResumeOffers(stores, resources.bus).recover))
    rabbit.consume(resources.broker, rabbit.DISPATCH_QUEUE, dispatcher.on_dispatch,
                   prefetch=settings.dispatcher_prefetch)
    return dispatcher
