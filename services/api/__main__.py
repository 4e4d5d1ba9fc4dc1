"""``python -m services.api``: the HTTP API (FastAPI on uvicorn)."""

import signal
import sys

import uvicorn

from herald.observability import setup_logging
from herald.settings import load_settings
from services.api.app import create_app


def _exit_cleanly(signum: int, _frame: object) -> None:
    sys.exit(0)


def main() -> None:
    settings = load_settings()
    setup_logging("api", settings.log_level)
    # uvicorn drains requests and runs the lifespan shutdown on SIGTERM/SIGINT, then re-raises
    # the signal to the handler that was installed before it: make that one a clean exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    uvicorn.run(create_app(settings), host="0.0.0.0", port=settings.api_port,
                loop="uvloop", http="httptools", log_config=None, access_log=False,
                timeout_graceful_shutdown=int(settings.grace_period_s))


if __name__ == "__main__":
    main()
