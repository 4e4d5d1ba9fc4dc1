"""Composition root of the api: the FastAPI application and the pod behind it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

from fastapi import FastAPI

from herald.observability import CANCEL_FLAGS, PODS_LIVE
from herald.runtime import VERSION, Pod
from herald.service_layer.campaigns import CampaignCreator
from herald.settings import Settings
from services.api import errors
from services.api.deps import AppServices
from services.api.routes import campaigns, devices, ops, schedules

log = logging.getLogger(__name__)

GAUGE_REFRESH_S = 5.0
SERVICES = ("api", "dispatcher", "sender", "scheduler")


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pod = Pod("api", settings, acknowledges_cancels=False)
        app.state.services = AppServices(pod=pod, creator=CampaignCreator(pod.stores, pod.bus))
        await pod.start()
        pod.spawn(_refresh_gauges(pod), "gauges")
        log.info("api ready: pod %s on :%d", pod.id, settings.api_port)
        yield
        await pod.stop()

    app = FastAPI(title="Herald", version=VERSION, lifespan=lifespan,
                  summary="Mass push-notification campaigns through FCM, stoppable mid-flight.")
    errors.install(app)
    for module in (devices, campaigns, schedules, ops):
        app.include_router(module.router)
    return app


async def _refresh_gauges(pod: Pod) -> None:
    """Gauges read from Redis: live pods per service and live cancel flags."""
    while True:
        try:
            live = Counter(beat.service for beat in await pod.pods.live())
            for service in SERVICES:
                PODS_LIVE.labels(service).set(live.get(service, 0))
            CANCEL_FLAGS.set(await pod.flags.count())
        except Exception:
            log.warning("refreshing gauges failed", exc_info=True)
        await asyncio.sleep(GAUGE_REFRESH_S)
