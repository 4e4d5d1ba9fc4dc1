"""Composition root of the scheduler: fires scheduled campaigns when they are due."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from herald.clock import utcnow
from herald.observability import SCHEDULE_CLAIMS, SCHEDULE_LAG_SECONDS
from herald.runtime import Pod, Worker
from herald.service_layer.campaigns import CampaignCreator

log = logging.getLogger(__name__)


class Scheduler(Worker):
    def __init__(self, pod: Pod) -> None:
        self._pod = pod
        self._creator = CampaignCreator(pod.stores, pod.bus)
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        self._pod.spawn(self._loop(), "fire-due")

    async def stop(self) -> None:
        self._stopping.set()

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                while await self._fire_one():
                    pass
            except Exception:
                log.warning("firing due campaigns failed; retrying", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._pod.settings.scheduler_poll_s)

    async def _fire_one(self) -> bool:
        now = utcnow()
        fired = await self._pod.stores.campaigns.fire_due(now, self._pod.id)
        if fired is None:
            return False
        SCHEDULE_CLAIMS.inc()
        SCHEDULE_LAG_SECONDS.observe(max(0.0, (now - fired["due_at"]).total_seconds()))
        log.info("fired %s, due %s", fired["_id"], fired["due_at"].isoformat())
        await self._creator.wake_dispatcher(str(fired["_id"]))
        return True


def build(pod: Pod) -> Scheduler:
    return Scheduler(pod)
