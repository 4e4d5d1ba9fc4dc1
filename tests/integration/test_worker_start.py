"""A process whose start hangs (here a broker that accepts the connection and never speaks AMQP)
exits after ``HERALD_START_TIMEOUT_S`` with one log line, for its supervisor to start it again,
instead of staying alive, unready and unrestarted. The api and a worker (the dispatcher and the
scheduler start as the sender does, through ``run_worker``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.processes import free_port
from herald.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", ["api", "sender"])
def test_a_process_that_cannot_start_exits_after_the_start_timeout(
        settings: Settings, silent_broker: int, service: str) -> None:
    env = {**os.environ,
           "HERALD_MONGODB_URL": settings.mongodb_url,
           "HERALD_REDIS_URL": settings.redis_url,
           "HERALD_FCM_ENDPOINT": settings.fcm_endpoint,
           "HERALD_FCM_PROJECT_ID": settings.fcm_project_id,
           "HERALD_RABBITMQ_URL": f"amqp://guest:guest@127.0.0.1:{silent_broker}/",
           "HERALD_START_TIMEOUT_S": "2", "HERALD_METRICS_PORT": "0",
           "HERALD_API_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-m", f"services.{service}"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert (f"{service} exiting: not started within HERALD_START_TIMEOUT_S (2 s)"
            in output), output
    assert "Traceback" not in output
