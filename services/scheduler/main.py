"""Composition root of the scheduler: fires scheduled campaigns and schedule runs when due.

It sleeps until the next due instant, but never longer than ``HERALD_SCHEDULER_POLL_S``, so a
campaign scheduled while it sleeps is still fired on time; any number of replicas may run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from herald.clock import utcnow
from herald.runtime.tasks import Background
from herald.runtime.worker import PodParts, Worker
from herald.service_layer.approval import ApprovalGate
from herald.service_layer.campaigns import CampaignCreator
from herald.service_layer.scheduling import SchedulerPolicy, Scheduling

log = logging.getLogger(__name__)

MIN_WAIT_S = 0.01


class Scheduler(Worker):
    def __init__(self, scheduling: Scheduling, background: Background, poll_s: float) -> None:
        self._scheduling = scheduling
        self._background = background
        self._poll_s = poll_s
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        self._background.spawn(self._loop(), "fire-due")

    async def stop(self) -> None:
        self._stopping.set()

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                wait_s = await self._tick()
            except Exception:
                log.warning("firing due work failed; retrying", exc_info=True)
                wait_s = self._poll_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait_s)

    async def _tick(self) -> float:
        """Fire everything due now; seconds until the next due instant (bounded by the poll)."""
        now = utcnow()
        await self._scheduling.fire_due_campaigns(now)
        await self._scheduling.run_due_schedules(now)
        until_due = await self._scheduling.seconds_until_due(utcnow())
        poll_s = self._poll_s
        return poll_s if until_due is None else max(MIN_WAIT_S, min(until_due, poll_s))


def compose(parts: PodParts) -> Scheduler:
    settings, stores = parts.settings, parts.resources.stores
    policy = SchedulerPolicy(parts.identity.id, settings.misfire_grace_s, settings.lease_s)
    creator = CampaignCreator(stores.campaigns, stores.idempotency, parts.resources.bus,
                              ApprovalGate(stores.devices, settings.approval_min_audience))
    scheduling = Scheduling(stores.campaigns, stores.schedules, creator, policy)
    return Scheduler(scheduling, parts.background, settings.scheduler_poll_s)
