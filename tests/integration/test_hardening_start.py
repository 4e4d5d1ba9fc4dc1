"""Issue 21, access hardening, as processes start: a weak or placeholder bootstrap key from any
source stops the api; no start error shows a password; a disabled certificate check is a WARNING;
no log line is longer than 2,000 characters; workers listen on loopback unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.processes import free_port
from herald.settings import Settings
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
MAX_LOG_LINE = 2000
PLACEHOLDER = "CHANGE-ME-to-a-long-random-secret"  # deploy/kubernetes/base/secrets/*.example


def service_env(settings: Settings, **overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HERALD_")}
    return {**env, "HERALD_MONGODB_URL": settings.mongodb_url,
            "HERALD_REDIS_URL": settings.redis_url, "HERALD_RABBITMQ_URL": settings.rabbitmq_url,
            "HERALD_FCM_ENDPOINT": settings.fcm_endpoint, "HERALD_API_PORT": str(free_port()),
            "HERALD_METRICS_PORT": "0", "HERALD_START_TIMEOUT_S": "3", **overrides}


def run(module: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=60)


# --- finding 2: a weak key from a file was accepted ---------------------------------------------
@pytest.mark.parametrize("secret", ["sh0rt-s3cret", PLACEHOLDER, PLACEHOLDER + "\n", "change-me" * 4])
def test_a_weak_or_placeholder_bootstrap_key_in_a_file_stops_the_api(
        settings: Settings, tmp_path: Path, secret: str) -> None:
    key_file = tmp_path / "bootstrap-api-key"
    key_file.write_text(secret)
    done = run("services.api", service_env(settings,
                                           HERALD_BOOTSTRAP_API_KEY_FILE=str(key_file)))
    assert done.returncode != 0
    assert "HERALD_BOOTSTRAP_API_KEY_FILE" in done.stderr
    assert secret.strip() not in done.stderr


def test_a_placeholder_bootstrap_key_in_the_environment_stops_the_api(
        settings: Settings) -> None:
    done = run("services.api", service_env(settings, HERALD_BOOTSTRAP_API_KEY=PLACEHOLDER))
    assert done.returncode != 0 and "HERALD_BOOTSTRAP_API_KEY" in done.stderr
    assert PLACEHOLDER not in done.stderr


# --- finding 11: a store URL with a wrong scheme was echoed with its password -------------------
@pytest.mark.parametrize("variable", ["HERALD_MONGODB_URL", "HERALD_RABBITMQ_URL",
                                      "HERALD_REDIS_URL", "HERALD_FCM_ENDPOINT"])
def test_no_start_error_shows_a_password(settings: Settings, variable: str) -> None:
    done = run("services.api", service_env(
        settings, **{variable: "ftp://herald:pa55-w0rd-secret@store.internal:1/herald"}))
    assert done.returncode != 0 and variable in done.stderr
    assert "pa55-w0rd-secret" not in done.stderr
    assert "store.internal" in done.stderr  # still says which URL it was


# --- finding 12: certificate checks switched off without a word ---------------------------------
@pytest.mark.parametrize(("variable", "url"), [
    ("HERALD_REDIS_URL", "rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none"),
    ("HERALD_MONGODB_URL", "mongodb://127.0.0.1:{port}/h?tls=true&tlsInsecure=true"),
    ("HERALD_MONGODB_URL", "mongodb://127.0.0.1:{port}/h?tls=true&tlsAllowInvalidCertificates=true"),
    ("HERALD_RABBITMQ_URL", "amqps://u:p@127.0.0.1:{port}/?no_verify_ssl=1"),
])
def test_a_disabled_certificate_check_logs_a_warning_at_start(
        settings: Settings, variable: str, url: str) -> None:
    done = run("services.scheduler", service_env(settings, **{variable: url.format(
        port=free_port())}))
    warnings = [line for line in done.stderr.splitlines()
                if " WARNING " in line and "certificate" in line]
    assert warnings, done.stderr[-3000:]
    assert variable in warnings[0]


# --- finding 3: a 1 MiB message became a 1 MiB log line -----------------------------------------
LOG_HUGE = """
import logging
from herald.observability import setup_logging
setup_logging("api", "INFO")
log = logging.getLogger("herald.test")
log.warning("body=%r", b"x" * (1 << 20))
try:
    raise ValueError("y" * (1 << 20))
except ValueError:
    log.exception("failed with %s", "z" * (1 << 20))
logging.getLogger("uvicorn.error").error("\\n".join(["w" * 5000] * 3))
"""


def test_no_log_line_is_longer_than_2000_characters_whatever_is_logged() -> None:
    done = subprocess.run([sys.executable, "-c", LOG_HUGE], cwd=ROOT, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines and max(len(line) for line in lines) <= MAX_LOG_LINE
    assert any("body=b'xxx" in line for line in lines)
    assert any("ValueError" in line for line in lines)  # the exception is still told


# --- finding 12: workers' metrics listened on every interface -----------------------------------
def listening_hosts(port: int) -> set[str]:
    """Local addresses listening on ``port`` (IPv4), from the kernel's own table."""
    hosts = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            hosts.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return hosts


def test_a_worker_serves_its_metrics_on_loopback_unless_told_otherwise(
        settings: Settings, tmp_path: Path, silent_broker: int) -> None:
    port = free_port()  # the broker never answers: the worker stays up, starting, serving metrics
    with (tmp_path / "scheduler.log").open("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.scheduler"], cwd=ROOT, text=True, stderr=log,
            env=service_env(settings, HERALD_METRICS_PORT=str(port), HERALD_START_TIMEOUT_S="60",
                            HERALD_RABBITMQ_URL=f"amqp://guest:guest@127.0.0.1:{silent_broker}/"))
        try:
            hosts = wait_for(lambda: listening_hosts(port) or process.poll() is not None, 60,
                             "the metrics port to listen")
        finally:  # stuck in its start, a worker may not stop on SIGTERM (test_worker_start.py)
            process.kill()
            process.wait(timeout=30)
            log.seek(0)
            told = log.read()
    assert hosts == {"127.0.0.1"}, told[-3000:]
