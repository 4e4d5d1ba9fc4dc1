"""``python -m services.api``: the HTTP API (FastAPI on uvicorn)."""

import signal
import sys

import uvicorn
from fastapi import FastAPI

from herald.observability import setup_logging
from herald.settings import Settings, load_settings
from services.api.app import create_app
from services.api.bodies import LOCK_SWITCH_INTERVAL_S

STARTUP_FAILURE = 3
"""uvicorn's own exit status for an application whose start failed (as ``uvicorn.run``)."""


def _exit_cleanly(signum: int, _frame: object) -> None:
    sys.exit(0)


def uvicorn_config(app: FastAPI, settings: Settings) -> uvicorn.Config:
    """How the api is served: on ``HERALD_BIND_HOST`` (loopback unless a container says
    otherwise), believing ``X-Forwarded-For``/``-Proto`` only from the proxies named in
    ``HERALD_API_FORWARDED_ALLOW_IPS`` (uvicorn's own ``forwarded_allow_ips``; none by default,
    where uvicorn alone would trust loopback)."""
    proxies = settings.api_forwarded_allow_ips.strip()
    return uvicorn.Config(app, host=settings.bind_host, port=settings.api_port, loop="uvloop",
                          http="httptools", log_config=None, access_log=False,
                          proxy_headers=bool(proxies), forwarded_allow_ips=proxies or "",
                          timeout_graceful_shutdown=int(settings.grace_period_s))


def main() -> None:
    settings = load_settings()
    setup_logging("api", settings.log_level)
    # uvicorn drains requests and runs the lifespan shutdown on SIGTERM/SIGINT, then re-raises
    # the signal to the handler that was installed before it: make that one a clean exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    sys.setswitchinterval(LOCK_SWITCH_INTERVAL_S)
    server = uvicorn.Server(uvicorn_config(create_app(settings), settings))
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
