"""Liveness, readiness and the pod registry."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from herald.domain.access import Scope
from herald.domain.pods import PodBeat
from services.api.auth import Caller, scoped
from services.api.deps import PodId, Pods, ReadinessCheck

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz(pod_id: PodId) -> dict[str, str]:
    """The process is alive (it answers); says nothing about its dependencies."""
    return {"status": "ok", "pod": pod_id}


@router.get("/readyz", responses={503: {"description": "A dependency is unreachable"}})
async def readyz(readiness: ReadinessCheck) -> JSONResponse:
    """Ready when MongoDB, RabbitMQ and Redis all answer."""
    results = await readiness.check()
    ready = all(result == "ok" for result in results.values())
    return JSONResponse({"status": "ready" if ready else "unavailable", "checks": results},
                        status_code=200 if ready else 503)


@router.get("/v1/pods")
async def list_pods(pods: Pods,
                    _: Annotated[Caller, scoped(Scope.PODS_READ)]) -> dict[str, Any]:
    """Live pods, from their heartbeats; a pod is dead once its heartbeat expires."""
    beats = await pods.live()
    return {"pods": [pod_summary(b, pods.heartbeat_ttl_s) for b in beats],
            "heartbeat_interval_s": pods.heartbeat_interval_s,
            "dead_after_missed_beats": pods.heartbeat_misses}


def pod_summary(beat: PodBeat, ttl_s: float) -> dict[str, object]:
    """A heartbeat as the API shows it."""
    return {**asdict(beat), "age_s": round(time.time() - beat.beat_at, 3),
            "dead_after_s": ttl_s}


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    """Prometheus exposition of this pod's metrics."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
