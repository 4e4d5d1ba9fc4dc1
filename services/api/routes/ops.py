"""Liveness, readiness and the pod registry."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from herald.runtime import pod_summary
from services.api.deps import Services

router = APIRouter(tags=["operations"])

READY_CHECK_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz(services: Services) -> dict[str, str]:
    """The process is alive (it answers); says nothing about its dependencies."""
    return {"status": "ok", "pod": services.pod.id}


@router.get("/readyz", responses={503: {"description": "A dependency is unreachable"}})
async def readyz(services: Services) -> JSONResponse:
    """Ready when MongoDB, RabbitMQ and Redis all answer."""
    pod = services.pod
    checks = {
        "mongodb": _check(pod.db.command("ping")),
        "rabbitmq": _check(pod.broker.ping(timeout=READY_CHECK_TIMEOUT_S)),
        "redis": _check(pod.redis.ping()),
    }
    results = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
    ready = all(result == "ok" for result in results.values())
    return JSONResponse({"status": "ready" if ready else "unavailable", "checks": results},
                        status_code=200 if ready else 503)


async def _check(probe: Any) -> str:
    try:
        answer = await asyncio.wait_for(probe, READY_CHECK_TIMEOUT_S)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok" if answer is not False else "error: no answer"


@router.get("/v1/pods")
async def list_pods(services: Services) -> dict[str, Any]:
    """Live pods, from their heartbeats; a pod is dead once its heartbeat expires."""
    settings = services.pod.settings
    beats = await services.pod.pods.live()
    return {"pods": [pod_summary(b, settings.heartbeat_ttl_s) for b in beats],
            "heartbeat_interval_s": settings.heartbeat_interval_s,
            "dead_after_missed_beats": settings.heartbeat_misses}


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    """Prometheus exposition of this pod's metrics."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
