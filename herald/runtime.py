"""What every Herald process shares: its identity, its connections, the cancel broadcast it
listens to, its heartbeat, its ``/healthz`` and ``/metrics`` endpoint, and a graceful stop.

``Pod`` is the composition root's toolbox: a service builds one, registers its own handlers on
``pod.broker``, and hands control to ``run_worker`` (or, for the api, to uvicorn's lifespan).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass

import uvloop
from aiohttp import web
from faststream.rabbit.annotations import RabbitMessage
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from herald.adapters import mongo, rabbit
from herald.adapters import redis as redis_adapter
from herald.adapters.redis import CancelFlags, PodBeat, PodRegistry
from herald.adapters.stores import Stores
from herald.domain.messages import CancelCampaign
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.observability import CANCEL_UNMATCHED, setup_logging
from herald.service_layer.cancellation import CampaignNotFound, Cancellation, CannotCancel
from herald.settings import Settings, load_settings

VERSION = "0.1.0"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodIdentity:
    id: str
    service: str
    host: str
    pid: int
    started_at: float

    @classmethod
    def new(cls, service: str) -> PodIdentity:
        host = socket.gethostname()
        pid = os.getpid()
        return cls(id=f"{service}-{host}-{pid}-{uuid.uuid4().hex[:6]}", service=service,
                   host=host, pid=pid, started_at=time.time())


class WorkTracker:
    """Which campaigns this pod is sending or paging right now, and a way to wait for it to stop."""

    def __init__(self) -> None:
        self._active: Counter[str] = Counter()
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def working_on(self, campaign_id: str) -> AsyncIterator[None]:
        self._active[campaign_id] += 1
        try:
            yield
        finally:
            self._active[campaign_id] -= 1
            if self._active[campaign_id] <= 0:
                del self._active[campaign_id]
            async with self._changed:
                self._changed.notify_all()

    def campaigns(self) -> list[str]:
        return sorted(self._active)

    async def wait_idle(self, campaign_id: str, timeout_s: float) -> bool:
        """Wait until no work on ``campaign_id`` is in flight here; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: campaign_id not in self._active), timeout_s)
            except TimeoutError:
                return False
        return True


class CancelWatch:
    """Campaigns this pod knows to be cancelled; checked before every FCM request and page.

    Each campaign has an ``asyncio.Event``, so a sender waiting out a backoff wakes at once.
    """

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, campaign_id: str) -> asyncio.Event:
        return self._events.setdefault(campaign_id, asyncio.Event())

    def mark(self, campaign_id: str) -> bool:
        """Remember a cancel; True the first time this pod hears of it."""
        event = self.event(campaign_id)
        fresh = not event.is_set()
        event.set()
        return fresh

    def is_cancelled(self, campaign_id: str) -> bool:
        event = self._events.get(campaign_id)
        return event is not None and event.is_set()


class Pod:
    """One running Herald process and the clients it owns."""

    def __init__(self, service: str, settings: Settings, *, acknowledges_cancels: bool) -> None:
        self.settings = settings
        self.identity = PodIdentity.new(service)
        self.mongo_client = mongo.connect(settings, app_name=f"herald-{service}")
        self.db = mongo.database(self.mongo_client, settings)
        self.stores = Stores.on(self.db)
        self.redis = redis_adapter.connect(settings)
        self.keys = RedisKeys(settings.mongodb_database)
        self.flags = CancelFlags(self.redis, self.keys, settings.cancel_flag_ttl_s)
        self.pods = PodRegistry(self.redis, self.keys, settings.heartbeat_ttl_s)
        self.broker = rabbit.make_broker(settings, graceful_timeout_s=settings.grace_period_s)
        self.bus = rabbit.Bus(self.broker)
        self.cancellation = Cancellation(self.stores, self.flags, self.pods, self.bus,
                                         self.identity.id)
        self.watch = CancelWatch()
        self.tracker = WorkTracker()
        self.metrics_port: int | None = None
        self._acknowledges = acknowledges_cancels
        self._background: set[asyncio.Task[None]] = set()
        rabbit.consume(self.broker, rabbit.pod_cancel_queue(self.identity.id),
                       self._on_cancel_message, exchange=rabbit.CANCEL_EXCHANGE)

    @property
    def id(self) -> str:
        return self.identity.id

    async def start(self) -> None:
        """Connect, declare the topology, start consuming, then announce the pod."""
        await mongo.ensure_indexes(self.db)
        await self.broker.connect()
        await rabbit.declare_topology(self.broker)
        await self.broker.start()
        await self.beat()
        self.spawn(self._heartbeat_loop(), "heartbeat")

    def spawn(self, coroutine: Awaitable[None], name: str) -> None:
        """Run a background loop for the pod's lifetime; a crash is logged, never silent."""
        async def guarded() -> None:
            try:
                await coroutine
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task %s crashed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        """Stop consuming (waiting for in-flight handlers), vanish from the registry, close."""
        await self.broker.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.pods.remove(self.id)
        await self.redis.aclose()
        await self.mongo_client.close()

    async def beat(self) -> None:
        await self.pods.beat(PodBeat(**asdict(self.identity), version=VERSION,
                                     metrics_port=self.metrics_port,
                                     campaigns=self.tracker.campaigns()))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_s)
            try:
                await self.beat()
            except Exception:
                log.warning("heartbeat failed; retrying", exc_info=True)

    async def is_cancelled(self, campaign_id: str) -> bool:
        """Broadcast first (memory), then the Redis flag for cancels this pod missed."""
        if self.watch.is_cancelled(campaign_id):
            return True
        if await self.flags.is_raised(campaign_id):
            self.learn_cancel(campaign_id)
            return True
        return False

    def learn_cancel(self, campaign_id: str) -> None:
        """Note a cancel found outside the broadcast, and acknowledge it once idle."""
        if self.watch.mark(campaign_id) and self._acknowledges:
            self.spawn(self._acknowledge_when_idle(campaign_id), f"ack-{campaign_id}")

    async def _acknowledge_when_idle(self, campaign_id: str) -> None:
        started = time.monotonic()
        if not await self.tracker.wait_idle(campaign_id, self.settings.grace_period_s):
            # Still sending after the grace: acknowledging now would let the campaign be
            # counted before this pod's last batch is recorded. Its heartbeat speaks for it.
            log.warning("cancel of %s: still busy after %.0fs; not acknowledging", campaign_id,
                        self.settings.grace_period_s)
            return
        idle = time.monotonic()
        await self.cancellation.acknowledge(campaign_id, self.id)
        log.info("cancel of %s: idle after %.0f ms, acknowledged after %.0f ms", campaign_id,
                 1000 * (idle - started), 1000 * (time.monotonic() - started))

    async def _on_cancel_message(self, message: RabbitMessage) -> None:
        await rabbit.execute(message, CancelCampaign, self._apply_cancel)

    async def _apply_cancel(self, command: CancelCampaign) -> None:
        """Stop here at once, make the cancel take effect (idempotent), then acknowledge it."""
        acknowledge = self.watch.mark(command.campaign_id) and self._acknowledges
        try:
            outcome = await self.cancellation.request(
                command.campaign_id, command.reason, command.requested_by, broadcast=False)
        except (CampaignNotFound, CannotCancel) as exc:
            CANCEL_UNMATCHED.inc()
            log.warning("cancel message for %s matches no cancellable campaign: %s",
                        command.campaign_id, exc)
            return
        if outcome.status is not Status.CANCELLING:
            return
        if acknowledge:
            await self._acknowledge_when_idle(command.campaign_id)
        else:  # nothing to stop here; finish the cancel at once if no pod has to confirm
            await self.cancellation.try_finalize(command.campaign_id)


async def serve_health_and_metrics(pod: Pod, port: int) -> web.AppRunner:
    """``/healthz`` and ``/metrics`` on ``port`` (0 picks a free one, recorded in the heartbeat)."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pod": pod.id})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "0.0.0.0", port)
    await site.start()
    pod.metrics_port = port or _bound_port(runner)
    return runner


def _bound_port(runner: web.AppRunner) -> int:
    """The port the OS picked for a site asked to listen on port 0."""
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("metrics server is not listening")


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


def run_worker(service: str, default_metrics_port: int, *, acknowledges_cancels: bool,
               build: Callable[[Pod], Worker]) -> None:
    """Entrypoint of the dispatcher, sender and scheduler processes."""
    settings = load_settings()
    setup_logging(service, settings.log_level)
    uvloop.run(_run(service, settings, default_metrics_port, acknowledges_cancels, build))


async def _run(service: str, settings: Settings, default_metrics_port: int,
               acknowledges_cancels: bool, build: Callable[[Pod], Worker]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    pod = Pod(service, settings, acknowledges_cancels=acknowledges_cancels)
    worker = build(pod)
    port = settings.metrics_port if settings.metrics_port is not None else default_metrics_port
    runner = await serve_health_and_metrics(pod, port)
    await pod.start()
    await worker.start()
    log.info("%s ready: pod %s, metrics on :%s", service, pod.id, pod.metrics_port)
    await stop.wait()
    log.info("%s stopping (grace %.0fs)", service, settings.grace_period_s)
    await worker.stop()
    await pod.stop()
    await worker.close()
    await runner.cleanup()
    log.info("%s stopped", service)


def pod_summary(beat: PodBeat, ttl_s: float) -> dict[str, object]:
    """A heartbeat as the API shows it."""
    return {**asdict(beat), "age_s": round(time.time() - beat.beat_at, 3),
            "dead_after_s": ttl_s}

