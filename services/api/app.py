"""Composition root of the api: the FastAPI application and the pod behind it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

from fastapi import Depends, FastAPI

from herald import names
from herald.adapters import fcm
from herald.adapters.archival import ArchivalStore
from herald.adapters.archives import archive_target
from herald.adapters.errors import INFRASTRUCTURE_ERRORS
from herald.adapters.fleet_gauges import FleetReading, QueueDepths, refresh_fleet_gauges
from herald.adapters.fleet_rate import BUSY_CHUNKS_PER_SENDER, FleetRate
from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.adapters.rate_limit import Budget, FailedAuthentications, Rate, RequestBudget, TokenBucket
from herald.adapters.redis import StreamSlots
from herald.clock import utcnow
from herald.contracts.sizes import CAMPAIGN_BODY_MAX_BYTES
from herald.observability import CANCEL_FLAGS, PODS_LIVE
from herald.runtime.identity import VERSION
from herald.runtime.resources import Resources
from herald.runtime.rules import marketing_cap, quiet_window
from herald.runtime.worker import PodParts, StartTimedOut, exit_unstarted, running_pod
from herald.service_layer.access import Authenticator, OperatorLog, ensure_bootstrap_key
from herald.service_layer.approval import ApprovalGate
from herald.service_layer.archive_erasure import ArchiveEraser
from herald.service_layer.archiving import ArchivePolicy, Archivist
from herald.service_layer.campaigns import CampaignCreator
from herald.service_layer.forecasting import Forecaster, ForecastSettings
from herald.service_layer.holding_back import HoldingBack, RuleSettings
from herald.service_layer.retention import Retention, RetentionPolicy
from herald.service_layer.test_sends import TestSender, TestSendPolicy
from herald.settings import Settings
from services.api import errors
from services.api.auth import document_scopes
from services.api.bodies import BodyChecks
from services.api.deps import AppServices
from services.api.error_docs import document_errors
from services.api.gate import AccessGate, RouteBudgets
from services.api.limits import BodySizeLimit, RouteBodyLimits
from services.api.query import known_query_only
from services.api.readiness import Readiness
from services.api.routes import (
    access,
    audiences,
    campaigns,
    console,
    devices,
    docs,
    ops,
    schedules,
    users,
)

log = logging.getLogger(__name__)

GAUGE_REFRESH_S = 5.0
STREAM_STALE_S = 30.0
"""An event stream that gave no sign of life for this long (its replica died) frees its place."""
API_DESCRIPTION = """Every `/v1` call carries `Authorization: Bearer <API key>`; each operation
names the scope it needs (`x-herald-scope`). Roles hand out scopes: `viewer` reads everything,
`responder` also cancels, `operator` also sends, edits and schedules, `ingest` registers devices,
`admin` does everything including keys. `/healthz`, `/readyz`, `/metrics`, `/docs` and
`/openapi.json` are open, and so are the operator console's static files at `/console/` (its
every data call carries a key)."""
SERVICES = ("api", "dispatcher", "sender", "scheduler")


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with running_pod("api", settings, acknowledges_cancels=False) as (parts, _), \
                    fcm_client(settings) as client:
                if settings.bootstrap_api_key is not None:
                    await ensure_bootstrap_key(parts.resources.stores.api_keys,
                                               settings.bootstrap_api_key.get_secret_value())
                gauges = GaugeLoop()
                fleet_rate = FleetRate(parts.resources.redis, parts.resources.keys)
                app.state.services = _services(parts, gauges, client, fleet_rate)
                parts.background.spawn(_refresh_gauges(parts, gauges, fleet_rate), "gauges")
                parts.background.spawn(_expire(parts), "retention")
                log.info("api ready: pod %s on :%d", parts.identity.id, settings.api_port)
                yield
        except StartTimedOut as failure:  # raised by the pod's start only, before the yield
            exit_unstarted("api", failure)

    app = FastAPI(title="Herald", version=VERSION, lifespan=lifespan,
                  summary="Mass push-notification campaigns through FCM, stoppable mid-flight.",
                  description=API_DESCRIPTION, docs_url=None, redoc_url=None)
    errors.install(app)
    for module in (devices, users, campaigns, audiences, schedules, access, ops):
        app.include_router(module.router, dependencies=[Depends(known_query_only)])
    console.mount(app)
    docs.mount(app)
    body_limits = RouteBodyLimits(
        app.router.routes, import_bytes=settings.api_max_body_bytes,
        streamed_bytes=settings.api_max_import_bytes,
        other_bytes=min(settings.api_max_body_bytes, CAMPAIGN_BODY_MAX_BYTES))
    body_limits.document(app)
    app.add_middleware(BodySizeLimit, limits=body_limits)
    app.add_middleware(AccessGate, budgets=RouteBudgets(app.router.routes))  # the outermost
    document_scopes(app)
    document_errors(app)
    return app


@contextlib.asynccontextmanager
async def fcm_client(settings: Settings) -> AsyncIterator[fcm.FcmClient]:
    """The FCM client of test sends: the senders' own (``services/sender/main.py``), with the
    same OAuth tokens from the same service account, on a small pool of connections."""
    session = fcm.open_session(settings.model_copy(update={"sender_concurrency": 16}))
    tokens = fcm.access_tokens(settings)
    client = fcm.FcmClient(session, settings, tokens)
    try:
        yield client
    finally:
        client.close()
        if tokens is not None:
            tokens.close()
        await session.close()


def _services(parts: PodParts, gauges: GaugeLoop, client: fcm.FcmClient,
              fleet_rate: FleetRate) -> AppServices:
    resources = parts.resources
    readiness = Readiness({
        "mongodb": lambda: resources.db.command("ping"),
        "rabbitmq": lambda: resources.broker.ping(timeout=2.0),
        "redis": lambda: resources.redis.ping(),
        "gauges": gauges.fresh,
    })
    settings, stores = parts.settings, resources.stores
    approvals = ApprovalGate(stores.devices, settings.approval_min_audience)
    caps = RedisFrequencyCaps(resources.redis, resources.keys)
    return AppServices(
        pod_id=parts.identity.id, settings=settings, stores=stores,
        creator=CampaignCreator(stores.campaigns, stores.idempotency, resources.bus, approvals),
        approvals=approvals,
        test_sender=TestSender(
            stores.campaigns, stores.devices, stores.test_sends, client,
            rate=TokenBucket(resources.redis, resources.keys.rate_bucket(names.FLEET_RATE_BUCKET),
                             settings.project_rate_per_s),
            policy=TestSendPolicy(max_devices=settings.test_send_max_devices,
                                  per_device_per_hour=settings.test_send_per_device_per_hour)),
        forecaster=Forecaster(stores.campaigns, stores.devices, resources.registry, fleet_rate,
                              ForecastSettings(settings.project_rate_per_s,
                                               settings.urgent_reserve_share,
                                               settings.forecast_sender_rate_per_s)),
        decider=parts.decider, registry=resources.registry,
        readiness=readiness,
        background=parts.background, authenticator=Authenticator(resources.stores.api_keys),
        operator_log=OperatorLog(resources.stores.operator_log),
        request_budget=RequestBudget(resources.redis, resources.keys, {
            Budget.READ: Rate(settings.api_read_rate_per_s, settings.api_read_burst),
            Budget.WRITE: Rate(settings.api_rate_per_s, settings.api_burst),
            Budget.CANCEL: Rate(settings.api_cancel_rate_per_s, settings.api_cancel_burst)}),
        failed_authentications=FailedAuthentications(resources.redis, resources.keys, Rate(
            settings.api_auth_failures_per_min / 60, settings.api_auth_failure_burst)),
        stream_slots=StreamSlots(resources.redis, resources.keys, settings.api_streams_per_key,
                                 stale_s=STREAM_STALE_S),
        frequency_caps=caps,
        holding_back=HoldingBack(stores.devices, caps, RuleSettings(marketing_cap(settings),
                                                                    quiet_window(settings))),
        archived_erasures=ArchivalStore(resources.db),
        body_checks=BodyChecks())


def fleet_busy(reading: FleetReading, senders: int) -> bool:
    """Uncapped campaigns had enough open chunks to keep every live sender busy."""
    return senders > 0 and reading.uncapped_chunks_unfinished >= BUSY_CHUNKS_PER_SENDER * senders


GAUGES_STALE_S = 12 * GAUGE_REFRESH_S
"""Fleet gauges older than this make the api unready: the alerts that read them are blind."""


class GaugeLoop:
    """When the fleet gauges were last refreshed, for ``/readyz``."""

    def __init__(self) -> None:
        self.refreshed_at = time.monotonic()

    async def fresh(self) -> bool:
        return time.monotonic() - self.refreshed_at < GAUGES_STALE_S


async def _refresh_gauges(parts: PodParts, loop: GaugeLoop, fleet_rate: FleetRate) -> None:
    """Gauges of the whole stack, for dashboards and alerts: live pods per service, live cancel
    flags, and the fleet gauges (campaigns by status, queues, the FCM bucket...); and a reading
    of what the fleet sends (the forecasts' rate). A failed refresh is tried again,
    reconnecting to what went away."""
    resources, settings = parts.resources, parts.settings
    depths = QueueDepths(settings.rabbitmq_url)
    try:
        while True:
            try:
                await _refresh_once(resources, depths, settings.fcm_rate_per_min, fleet_rate)
                loop.refreshed_at = time.monotonic()
            except INFRASTRUCTURE_ERRORS as exc:
                log.warning("refreshing gauges failed (%s); trying again", type(exc).__name__)
            except Exception:
                log.warning("refreshing gauges failed", exc_info=True)
            await asyncio.sleep(GAUGE_REFRESH_S)
    finally:
        await depths.close()


async def _expire(parts: PodParts) -> None:
    """The api's part of retention (``service_layer/retention.py``, ``archiving.py``,
    ``archive_erasure.py``): what expired is deleted, finished campaigns past the retention
    archived then deleted, archives rewritten without people erased since, every few minutes;
    a failure is logged and tried again."""
    stores, settings = parts.resources.stores, parts.settings
    retention = Retention(stores.idempotency, stores.test_sends, RetentionPolicy(
        idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_s),
        test_sends_kept=timedelta(days=settings.retention_days)))
    archival, target = ArchivalStore(parts.resources.db), archive_target(settings)
    policy = ArchivePolicy(kept=timedelta(days=settings.retention_days),
                           every_s=settings.retention_interval_s)
    archivist = Archivist(stores, archival, target, parts.identity.id, policy)
    eraser = ArchiveEraser(archival, target, parts.identity.id, policy)
    while True:
        for protocol in (retention, archivist, eraser):
            try:
                await protocol.recover(utcnow())
            except Exception:
                log.warning("retention (%s) failed; trying again", type(protocol).__name__,
                            exc_info=True)
        await asyncio.sleep(min(GAUGE_REFRESH_S, settings.retention_interval_s))


async def _refresh_once(resources: Resources, depths: QueueDepths, fcm_rate_per_min: int,
                        fleet_rate: FleetRate) -> None:
    live = Counter(beat.service for beat in await resources.registry.live())
    for service in SERVICES:
        PODS_LIVE.labels(service).set(live.get(service, 0))
    CANCEL_FLAGS.set(await resources.flags.count())
    reading = await refresh_fleet_gauges(resources.db[names.CAMPAIGNS], resources.redis,
                                         resources.keys, depths, fcm_rate_per_min, utcnow())
    senders = live.get("sender", 0)
    await fleet_rate.observe(fleet_busy(reading, senders), senders)
    if reading.without_request_ids:
        log.warning("campaigns cancelled without a cancel request (see the runbook of "
                    "HeraldCancellationWithoutRequest): %s", reading.without_request_ids)
