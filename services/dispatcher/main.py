"""Composition root of the dispatcher: claims campaigns and pages them into chunks.

Work arrives two ways: a ``herald.dispatch`` message (the fast path, right after a campaign is
created or fired), and a periodic sweep of MongoDB that
- claims pending campaigns nobody announced;
- takes over campaigns whose dispatcher died: at once when its heartbeat is gone, or when its
  lease runs out (a lease is renewed every third of its length while paging);
- finishes cancels whose pods died before acknowledging;
- finishes campaigns whose last chunk was closed but never counted.
Paging that fails (RabbitMQ or MongoDB away) is resumed from the checkpoint while the lease is
still this dispatcher's.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from bson import ObjectId
from faststream.rabbit.annotations import RabbitMessage

from herald.adapters import rabbit
from herald.adapters.mongo import Document
from herald.clock import utcnow
from herald.domain.messages import DispatchCampaign
from herald.domain.status import Status
from herald.runtime import Pod, Worker
from herald.service_layer.completion import complete, reconcile
from services.dispatcher.paging import Paging

log = logging.getLogger(__name__)

MAX_CONCURRENT_CAMPAIGNS = 4
RETRY_PAUSE_S = 1.0
RECONCILE_EVERY_SWEEPS = 10


class Dispatcher(Worker):
    def __init__(self, pod: Pod) -> None:
        self._pod = pod
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        self._sweeps = 0
        rabbit.consume(pod.broker, rabbit.DISPATCH_QUEUE, self._on_dispatch, prefetch=10)

    async def start(self) -> None:
        self._pod.spawn(self._sweep_loop(), "sweep")
        self._pod.spawn(self._renew_leases(), "leases")

    async def stop(self) -> None:
        """Stop paging at the next chunk boundary and give the leases up."""
        self._stopping = True
        if self._running:
            await asyncio.wait(list(self._running.values()),
                               timeout=self._pod.settings.grace_period_s)

    async def _on_dispatch(self, message: RabbitMessage) -> None:
        await rabbit.execute(message, DispatchCampaign,
                             lambda command: self._claim(command.campaign_id))

    def _lease_until(self) -> datetime:
        return utcnow() + timedelta(seconds=self._pod.settings.lease_s)

    async def _claim(self, campaign_id: str | None) -> bool:
        """Claim one campaign (that one, or any claimable) and start paging it."""
        if self._stopping or campaign_id in self._running:
            return False
        campaign = await self._pod.stores.campaigns.claim_for_dispatch(
            campaign_id, self._pod.id, utcnow(), self._lease_until())
        if campaign is None:
            return False
        self._start_paging(campaign)
        return True

    def _start_paging(self, campaign: Document) -> None:
        campaign_id = str(campaign["_id"])
        if campaign_id in self._running:
            return  # this dispatcher re-claimed its own campaign (its lease lapsed): one is enough
        log.info("claimed %s (%s)", campaign_id,
                 "takeover" if campaign["dispatch"]["takeovers"] else "new")
        self._running[campaign_id] = asyncio.create_task(self._page(campaign), name=campaign_id)

    async def _page(self, campaign: Document | None) -> None:
        assert campaign is not None
        campaign_id = str(campaign["_id"])
        try:
            async with self._pod.tracker.working_on(campaign_id):
                while campaign is not None and not self._stopping:
                    try:
                        await Paging(self._pod, campaign, lambda: self._stopping).run()
                        return
                    except Exception:
                        log.exception("paging %s failed; resuming from its checkpoint", campaign_id)
                        await asyncio.sleep(RETRY_PAUSE_S)
                        campaign = await self._still_mine_or_none(campaign["_id"])
        finally:
            self._running.pop(campaign_id, None)

    async def _still_mine_or_none(self, campaign_id: ObjectId) -> Document | None:
        """The campaign, if this dispatcher still holds its lease (renewed); None if it lost it
        or cannot tell (an outage): the lease then expires and any dispatcher resumes."""
        try:
            if await self._pod.stores.campaigns.renew_lease(campaign_id, self._pod.id,
                                                            self._lease_until()):
                return await self._pod.stores.campaigns.get(campaign_id)
        except Exception:
            log.warning("cannot tell whether %s is still ours; leaving it to its lease",
                        campaign_id, exc_info=True)
        return None

    async def _renew_leases(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._pod.settings.lease_s / 3)
            for campaign_id in list(self._running):
                try:
                    await self._pod.stores.campaigns.renew_lease(
                        ObjectId(campaign_id), self._pod.id, self._lease_until())
                except Exception:
                    log.warning("renewing the lease of %s failed", campaign_id, exc_info=True)

    async def _sweep_loop(self) -> None:
        while not self._stopping:
            try:
                await self._sweep()
            except Exception:
                log.warning("sweep failed; retrying", exc_info=True)
            await asyncio.sleep(self._pod.settings.sweep_interval_s)

    async def _sweep(self) -> None:
        while len(self._running) < MAX_CONCURRENT_CAMPAIGNS and await self._claim(None):
            pass
        await self._take_over_from_dead_dispatchers()
        for campaign in await self._pod.stores.campaigns.with_status(Status.CANCELLING):
            await self._pod.cancellation.try_finalize(str(campaign["_id"]))
        self._sweeps += 1
        if self._sweeps % RECONCILE_EVERY_SWEEPS == 0:
            await self._finish_interrupted()

    async def _finish_interrupted(self) -> None:
        """Campaigns whose finishing a dead pod (or an outage) interrupted."""
        stores = self._pod.stores
        for campaign in await stores.campaigns.paged_and_open():
            await reconcile(stores, campaign)
        stale = utcnow() - timedelta(seconds=self._pod.settings.lease_s)
        for campaign in await stores.campaigns.stuck_finalizing(stale):
            log.warning("campaign %s was left finalizing; finishing it", campaign["_id"])
            await complete(stores, campaign)

    async def _take_over_from_dead_dispatchers(self) -> None:
        stores = self._pod.stores
        live = {pod.id for pod in await self._pod.pods.live(("dispatcher",))}
        for campaign in await stores.campaigns.paging():
            owner = campaign["dispatch"]["owner"]
            if owner in live or len(self._running) >= MAX_CONCURRENT_CAMPAIGNS or self._stopping:
                continue
            taken = await stores.campaigns.take_over(campaign["_id"], owner, self._pod.id,
                                                     self._lease_until())
            if taken is not None:
                log.warning("dispatcher %s is gone (no heartbeat); taking %s over", owner,
                            taken["_id"])
                self._start_paging(taken)


def build(pod: Pod) -> Dispatcher:
    return Dispatcher(pod)
