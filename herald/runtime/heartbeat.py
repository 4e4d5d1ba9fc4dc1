"""Every pod announces itself in Redis every ``HERALD_HEARTBEAT_INTERVAL_S``: alive, and what it
works on. A pod whose heartbeat expires is dead, and its work is taken over."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict

from herald.domain.pods import PodBeat
from herald.runtime.identity import VERSION, PodIdentity
from herald.runtime.tracking import WorkTracker
from herald.service_layer.ports import PodRegistry
from herald.service_layer.sending.fence import Fence

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, registry: PodRegistry, identity: PodIdentity, tracker: WorkTracker,
                 interval_s: float, fence: Fence | None = None) -> None:
        self._registry = registry
        self._identity = identity
        self._tracker = tracker
        self._interval_s = interval_s
        self._fence = fence
        self.metrics_port: int | None = None

    async def beat(self) -> None:
        started = time.monotonic()
        await self._registry.beat(PodBeat(**asdict(self._identity), version=VERSION,
                                          metrics_port=self.metrics_port,
                                          campaigns=self._tracker.campaigns()))
        if self._fence is not None:
            self._fence.confirm(started)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.beat()
            except Exception:
                log.warning("heartbeat failed; retrying", exc_info=True)

    async def vanish(self) -> None:
        """Leave the registry at a graceful stop, so nobody waits for this pod's beats."""
        try:
            await self._registry.remove(self._identity.id)
        except Exception:
            log.warning("could not remove the heartbeat; it expires by itself", exc_info=True)
