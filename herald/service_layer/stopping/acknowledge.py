"""The acknowledge path: a pod that may be sending a campaign tells the store, once per stopping
decision, that it has stopped and recorded what it had in flight; then it reports to the
settler, which settles the stop if this was the last acknowledgement.

Only senders and dispatchers acknowledge (the pods a decision waits for, ``pods.py``). A pod
still busy after the grace period does not: acknowledging then would let the campaign be counted
before its last batch is recorded; its heartbeat speaks for it once it is idle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from herald.domain.documents import Campaign, Decision
from herald.service_layer.ports import CampaignCancels

log = logging.getLogger(__name__)

REMEMBERED = 10_000
"""Decisions a pod remembers having acknowledged (a decision is heard once per pod anyway)."""


class Idleness(Protocol):
    async def wait_idle(self, campaign_id: str, timeout_s: float) -> bool:
        """Wait until nothing of the campaign is in flight in this pod; False on timeout."""
        ...


Spawn = Callable[[Awaitable[None], str], None]
Settle = Callable[[str], Awaitable[Campaign | None]]


class Acknowledger:
    def __init__(self, campaigns: CampaignCancels, settle: Settle, idleness: Idleness,
                 spawn: Spawn, *, pod_id: str, grace_s: float, acknowledges: bool) -> None:
        self._campaigns = campaigns
        self._settle = settle
        self._idleness = idleness
        self._spawn = spawn
        self._pod_id = pod_id
        self._grace_s = grace_s
        self._acknowledges = acknowledges
        self._done: dict[str, None] = {}

    def decided(self, campaign_id: str, decision: Decision) -> None:
        """A stopping decision this pod learned of (``PodView.on_decision``): acknowledge it
        once idle, in the background (the next broadcast must not wait for this one)."""
        if not self._acknowledges or decision.id in self._done:
            return
        self._done[decision.id] = None
        if len(self._done) > REMEMBERED:
            del self._done[next(iter(self._done))]
        self._spawn(self._when_idle(campaign_id, decision), f"ack-{decision.id}")

    async def _when_idle(self, campaign_id: str, decision: Decision) -> None:
        started = time.monotonic()
        if not await self._idleness.wait_idle(campaign_id, self._grace_s):
            log.warning("%s of %s: still busy after %.0fs; not acknowledging", decision.kind.value,
                        campaign_id, self._grace_s)
            return
        idle = time.monotonic()
        await self._campaigns.add_ack(campaign_id, decision, self._pod_id)
        await self._settle(campaign_id)
        log.info("%s of %s: idle after %.0f ms, acknowledged after %.0f ms", decision.kind.value,
                 campaign_id, 1000 * (idle - started), 1000 * (time.monotonic() - started))
