"""``/healthz`` and ``/metrics`` of the worker services (the api serves its own)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


async def serve_health_and_metrics(pod_id: str, host: str,
                                   port: int) -> tuple[web.AppRunner, int]:
    """Serve on ``host:port`` (``HERALD_BIND_HOST``, loopback unless a container says
    otherwise; port 0 picks a free one); the runner and the port actually bound."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pod": pod_id})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, port or _bound_port(runner)


def _bound_port(runner: web.AppRunner) -> int:
    """The port the OS picked for a site asked to listen on port 0."""
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("metrics server is not listening")
