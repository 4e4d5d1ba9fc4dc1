"""Composition root of the dispatcher: claims campaigns and pages them into chunks.

Work arrives two ways: a ``herald.dispatch`` message (the fast path, right after a campaign is
created or fired), and a periodic sweep of MongoDB that claims pending campaigns nobody announced
and campaigns whose dispatcher's lease ran out (the dispatcher died), and finishes cancels whose
pods died before acknowledging.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from faststream.rabbit.annotations import RabbitMessage
from pydantic import ValidationError

from herald.adapters import rabbit
from herald.clock import utcnow
from herald.domain.messages import DispatchCampaign
from herald.domain.status import Status
from herald.runtime import Pod, Worker
from services.dispatcher.paging import Paging

log = logging.getLogger(__name__)

MAX_CONCURRENT_CAMPAIGNS = 4


class Dispatcher(Worker):
    def __init__(self, pod: Pod) -> None:
        self._pod = pod
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        rabbit.consume(pod.broker, rabbit.DISPATCH_QUEUE, self._on_dispatch, prefetch=10)

    async def start(self) -> None:
        self._pod.spawn(self._sweep_loop(), "sweep")

    async def stop(self) -> None:
        """Stop paging at the next chunk boundary and give the leases up."""
        self._stopping = True
        if self._running:
            await asyncio.wait(list(self._running.values()),
                               timeout=self._pod.settings.grace_period_s)

    async def _on_dispatch(self, message: RabbitMessage) -> None:
        try:
            command = DispatchCampaign.model_validate_json(message.body)
        except ValidationError as exc:
            log.warning("malformed dispatch message dead-lettered: %s",
                        exc.errors(include_url=False))
            await message.reject(requeue=False)
            return
        try:
            await self._claim(command.campaign_id)
        except Exception:
            log.exception("claiming %s failed; handing the message back", command.campaign_id)
            await asyncio.sleep(1.0)
            await message.nack(requeue=True)
            return
        await message.ack()

    async def _claim(self, campaign_id: str | None) -> bool:
        """Claim one campaign (that one, or any claimable) and start paging it."""
        if self._stopping or campaign_id in self._running:
            return False
        now = utcnow()
        campaign = await self._pod.stores.campaigns.claim_for_dispatch(
            campaign_id, self._pod.id, now, now + timedelta(seconds=self._pod.settings.lease_s))
        if campaign is None:
            return False
        claimed_id = str(campaign["_id"])
        log.info("claimed %s (%s)", claimed_id,
                 "takeover" if campaign["dispatch"]["takeovers"] else "new")
        self._running[claimed_id] = asyncio.create_task(self._page(campaign), name=claimed_id)
        return True

    async def _page(self, campaign: dict[str, object]) -> None:
        campaign_id = str(campaign["_id"])
        try:
            async with self._pod.tracker.working_on(campaign_id):
                await Paging(self._pod, campaign, lambda: self._stopping).run()
        except Exception:
            log.exception("paging %s crashed; its lease will expire and be taken over",
                          campaign_id)
        finally:
            self._running.pop(campaign_id, None)

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
        for campaign in await self._pod.stores.campaigns.with_status(Status.CANCELLING):
            await self._pod.cancellation.try_finalize(str(campaign["_id"]))


def build(pod: Pod) -> Dispatcher:
    return Dispatcher(pod)
