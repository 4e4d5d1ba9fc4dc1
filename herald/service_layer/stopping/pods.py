"""Which pods a stopping decision waits for: those that may be sending the campaign."""

from __future__ import annotations

import logging

from herald.service_layer.ports import PodRegistry

log = logging.getLogger(__name__)

STOPPING_SERVICES = ("sender", "dispatcher")
"""Services whose pods must confirm they stopped before a stop is settled."""

FLAG_REFRESH_S = 1.0
"""How often a pod re-reads the cancel flag of a campaign it works on (the fallback path), and
how long after a decision a pod's heartbeat that says it is idle speaks for it."""


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
    the stop is settled must have stopped, see ``still_stopping``)."""
    try:
        return tuple(pod.id for pod in await pods.live(STOPPING_SERVICES))
    except Exception:  # best effort: waiting for every live pod is the safe fallback
        log.warning("live pods unknown (Redis away); waiting for their heartbeats")
        return None
