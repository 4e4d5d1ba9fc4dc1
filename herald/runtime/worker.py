"""The life of a Herald process: compose, start, serve until a signal, stop gracefully.

``run_worker`` is the entrypoint of the dispatcher, sender and scheduler; ``running_pod`` is the
same life without signals or a health server, for the api's lifespan and for tests that run a
pod in their own process. A service's composition root is a function from ``PodParts`` to its
``Worker``: it builds its handlers from the parts they use and registers their consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import uvloop

from herald.adapters import rabbit
from herald.adapters.redis import FirstSightings
from herald.domain.documents import Campaign
from herald.observability import setup_logging
from herald.runtime.cancel_listener import CancelListener
from herald.runtime.health import serve_health_and_metrics
from herald.runtime.heap import settle_heap
from herald.runtime.heartbeat import Heartbeat
from herald.runtime.identity import PodIdentity
from herald.runtime.resources import Resources
from herald.runtime.tasks import Background
from herald.runtime.tracking import WorkTracker
from herald.service_layer.access import OperatorLog
from herald.service_layer.offers import ResumeOffers
from herald.service_layer.rollout import RolloutDriver
from herald.service_layer.sending.fence import Fence
from herald.service_layer.stopping import Acknowledger, Decider, PodView, Settler
from herald.settings import Settings, load_settings

log = logging.getLogger(__name__)

MALFORMED_SEEN_TTL_S = 60
"""How long pods remember a malformed broadcast one of them dead-lettered (every pod receives it
within milliseconds of the others)."""
REQUEST_SEEN_TTL_S = 10
"""How long pods remember an outside tool's request one of them decided: identical messages
within it are one request (an AMQP ``message_id`` tells two apart)."""


class Worker:
    """A service's own part of a pod.

    It is built inside the running event loop, before the pod consumes anything; ``start`` runs
    once the pod is connected and consuming; ``stop`` when a signal arrives, before the pod drains
    its in-flight messages; ``close`` after the pod has stopped.
    """

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass(frozen=True)
class PodParts:
    """What a composition root builds its handlers from. Handlers get single parts (a store, the
    bus, ``view.verdict``...), never this whole."""

    settings: Settings
    identity: PodIdentity
    resources: Resources
    background: Background
    tracker: WorkTracker
    view: PodView
    decider: Decider
    settler: Settler
    rollouts: RolloutDriver
    heartbeat: Heartbeat
    fence: Fence


Compose = Callable[[PodParts], Worker]


def build_parts(service: str, settings: Settings, *, acknowledges_cancels: bool) -> PodParts:
    """The pod's connections and its part in the stopping protocol, its cancel queue
    registered."""
    identity = PodIdentity.new(service)
    resources = Resources.build(service, settings)
    background, tracker = Background(), WorkTracker()
    stores = resources.stores
    settler = Settler(stores, resources.registry, identity.id,
                      stale_after=timedelta(seconds=settings.lease_s))
    view = PodView(stores.campaigns, resources.flags)
    operator_log = OperatorLog(stores.operator_log)
    decider = Decider(stores, resources.flags, resources.registry, resources.bus, settler.settle,
                      spawn=background.spawn)
    rollouts = RolloutDriver(stores, decider, resources.bus, operator_log)
    offers = ResumeOffers(stores, resources.bus)

    async def after_resume(resumed: Campaign) -> Campaign:
        moved = await rollouts.after_resume(resumed)
        # offered in the background: a campaign of a million keeps 2,000 chunks, and the
        # resume is answered at once (the sweep offers them if this pod dies meanwhile)
        background.spawn(_offered(offers, moved), f"offer-{moved.id}")
        return moved

    decider.on_resume(after_resume)
    view.on_decision(Acknowledger(stores.campaigns, settler.settle, tracker, background.spawn,
                                  pod_id=identity.id, grace_s=settings.grace_period_s,
                                  acknowledges=acknowledges_cancels).decided)
    listener = CancelListener(
        view, decider, operator_log,
        first_copy=FirstSightings(resources.redis, resources.keys, MALFORMED_SEEN_TTL_S).first,
        first_request=FirstSightings(resources.redis, resources.keys, REQUEST_SEEN_TTL_S,
                                     kind="request").first)
    rabbit.consume(resources.broker, rabbit.pod_cancel_queue(identity.id), listener.on_message,
                   exchange=rabbit.CANCEL_EXCHANGE, prefetch=rabbit.CANCEL_PREFETCH)
    fence = Fence(settings.heartbeat_ttl_s, settings.heartbeat_interval_s)
    heartbeat = Heartbeat(resources.registry, identity, tracker, settings.heartbeat_interval_s,
                          fence)
    return PodParts(settings, identity, resources, background, tracker, view, decider, settler,
                    rollouts, heartbeat, fence)


async def _offered(offers: ResumeOffers, resumed: Campaign) -> None:
    await offers.offer_now(resumed)


class StartTimedOut(Exception):
    """The pod did not connect and announce itself within ``HERALD_START_TIMEOUT_S``."""


async def start(parts: PodParts) -> None:
    """Connect, consume, then announce the pod.

    Bounded by ``HERALD_START_TIMEOUT_S``: a broker that accepts the connection and never
    answers (or a declaration that never returns) would otherwise leave a process alive, never
    ready and never restarted. Past the bound it raises ``StartTimedOut``, and the process exits
    for its supervisor to start it again.
    """
    timeout_s = parts.settings.start_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            await parts.resources.startup()
            await parts.heartbeat.beat()
    except TimeoutError:
        raise StartTimedOut(f"not started within HERALD_START_TIMEOUT_S ({timeout_s:g} s): "
                            "RabbitMQ, MongoDB or Redis did not answer") from None
    parts.background.spawn(parts.heartbeat.run(), "heartbeat")


def exit_unstarted(service: str, failure: StartTimedOut) -> NoReturn:
    """Leave a process that could not start, with one log line and exit status 1.

    Not through the event loop's shutdown: aio-pika's reconnect loop answers a cancel by
    scheduling its next attempt, and the loop would wait for it forever.
    """
    log.error("%s exiting: %s", service, failure)
    logging.shutdown()
    os._exit(1)


async def stop(parts: PodParts) -> None:
    """Stop consuming (waiting for in-flight handlers), vanish from the registry, close."""
    await parts.resources.stop_consuming()
    await parts.background.cancel_all()
    await parts.heartbeat.vanish()
    await parts.resources.shutdown()


@contextlib.asynccontextmanager
async def running_pod(service: str, settings: Settings, *, acknowledges_cancels: bool,
                      compose: Compose | None = None) -> AsyncIterator[tuple[PodParts, Worker]]:
    """A pod in this process, started, and stopped gracefully on the way out."""
    parts = build_parts(service, settings, acknowledges_cancels=acknowledges_cancels)
    worker = compose(parts) if compose is not None else Worker()
    await start(parts)
    await worker.start()
    try:
        yield parts, worker
    finally:
        await worker.stop()
        await stop(parts)
        await worker.close()


def run_worker(service: str, default_metrics_port: int, *, acknowledges_cancels: bool,
               compose: Compose) -> None:
    """Entrypoint of the dispatcher, sender and scheduler processes."""
    settings = load_settings()
    setup_logging(service, settings.log_level)
    uvloop.run(_run(service, settings, default_metrics_port, acknowledges_cancels, compose))


async def _run(service: str, settings: Settings, default_metrics_port: int,
               acknowledges_cancels: bool, compose: Compose) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    parts = build_parts(service, settings, acknowledges_cancels=acknowledges_cancels)
    worker = compose(parts)
    port = settings.metrics_port if settings.metrics_port is not None else default_metrics_port
    runner, parts.heartbeat.metrics_port = await serve_health_and_metrics(
        parts.identity.id, settings.bind_host, port)
    settle_heap()
    try:
        await start(parts)
    except StartTimedOut as exc:
        exit_unstarted(service, exc)
    await worker.start()
    log.info("%s ready: pod %s, metrics on :%s", service, parts.identity.id,
             parts.heartbeat.metrics_port)
    await stopping.wait()
    log.info("%s stopping (grace %.0fs)", service, settings.grace_period_s)
    await worker.stop()
    await stop(parts)
    await worker.close()
    await runner.cleanup()
    log.info("%s stopped", service)
