"""A whole Herald stack as local processes: nx-27017 (MongoDB wire server), the FCM emulator,
and the four services. Used by ``make up``/``make demo`` and by the end-to-end tests, which each
start their own stack with their own database, vhost and ports.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from devstack.processes import (
    ManagedProcess,
    free_port,
    http_ok,
    port_open,
    python_module,
    spawn,
    wait_until,
)
from devstack.service_account import write_service_account
from herald.domain.access import new_token

REPO = Path(__file__).resolve().parent.parent
SERVICE_MODULES = {
    "api": "services.api",
    "dispatcher": "services.dispatcher",
    "sender": "services.sender",
    "scheduler": "services.scheduler",
}


BOOTSTRAP_KEY_FILE = "bootstrap-api-key"
FCM_PROJECT_ID = "herald-local"
SERVICE_ACCOUNT_FILE = "fcm-service-account.json"


def replica_name(service: str, index: int) -> str:
    """``dispatcher`` for the first dispatcher (as the stack always named it), ``dispatcher-2``
    after it; senders and schedulers are numbered from 1."""
    if service in ("api", "dispatcher"):
        return service if index == 1 else f"{service}-{index}"
    return f"{service}-{index}"


def bootstrap_key(run_dir: Path) -> str:
    """The stack's admin key: read from ``<run_dir>/bootstrap-api-key``, made (readable by its
    owner only) the first time. The api gets the file's path, never the secret in its
    environment."""
    path = run_dir / BOOTSTRAP_KEY_FILE
    if not path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(new_token("bootstrap") + "\n")
    return path.read_text().strip()


@dataclass
class StackConfig:
    run_dir: Path
    database: str = "herald"
    mongodb_port: int = 27017
    start_mongodb: bool = True
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    """The services' broker user on the stack's vhost."""
    cancel_rabbitmq_url: str | None = None
    """The cancel publisher's user (``herald-cancel-<vhost>``) on that vhost, for outside tools."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    fcm_port: int = 8681
    api_port: int = 8000
    extra_env: dict[str, str] = field(default_factory=dict)
    oauth: bool = True
    """The FCM emulator checks OAuth tokens from its own token endpoint, and the services get a
    service account for it (``HERALD_FCM_CREDENTIALS``): the path production takes."""
    service_accounts: tuple[str, ...] = ()
    """Names of more service accounts the emulator accepts (``service_account(name)``), for a
    test that tells senders apart by their credentials."""

    @property
    def mongodb_url(self) -> str:
        return f"mongodb://127.0.0.1:{self.mongodb_port}/{self.database}?directConnection=true"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def api_key(self) -> str:
        """The admin key the api bootstraps (``HERALD_BOOTSTRAP_API_KEY_FILE``)."""
        return bootstrap_key(self.run_dir)

    def api_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def fcm_url(self) -> str:
        return f"http://127.0.0.1:{self.fcm_port}"

    def service_account(self, name: str | None = None) -> Path:
        """The service-account file (``name``: one of ``service_accounts``), made with a key of
        its own the first time; its ``token_uri`` is the emulator's ``/token``."""
        path = self.run_dir / (f"fcm-service-account-{name}.json" if name else SERVICE_ACCOUNT_FILE)
        if not path.exists():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            email = f"herald-{name or 'sender'}@{FCM_PROJECT_ID}.iam.gserviceaccount.com"
            write_service_account(path, token_uri=f"{self.fcm_url}/token",
                                  project_id=FCM_PROJECT_ID, client_email=email)
        return path

    def fcm_headers(self) -> dict[str, str]:
        """Headers for a request of a tool's own to the emulator: a bearer token of the stack's
        service account when the emulator checks them (granted by google-auth, as the senders'
        are), nothing otherwise."""
        if not self.oauth:
            return {}
        import google.auth.transport.requests
        from google.oauth2 import service_account

        credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            str(self.service_account()), scopes=["https://www.googleapis.com/auth/firebase.messaging"])
        credentials.refresh(google.auth.transport.requests.Request())
        return {"Authorization": f"Bearer {credentials.token}"}

    def service_env(self, **overrides: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("HERALD_")}
        env.update({
            "HERALD_MONGODB_URL": self.mongodb_url,
            "HERALD_RABBITMQ_URL": self.rabbitmq_url,
            "HERALD_REDIS_URL": self.redis_url,
            "HERALD_FCM_ENDPOINT": self.fcm_url,
            "HERALD_FCM_PROJECT_ID": FCM_PROJECT_ID,
            "HERALD_API_PORT": str(self.api_port),
            "PYTHONUNBUFFERED": "1",
        })
        if self.oauth:
            env["HERALD_FCM_CREDENTIALS"] = str(self.service_account())
        env.update(self.extra_env)
        env.update(overrides)
        return env


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.processes: dict[str, ManagedProcess] = {}
        self.metrics_targets: dict[str, list[str]] = {}
        """``host:port`` of each started service's ``/metrics``, by service."""
        self.api_urls: list[str] = [config.api_url]
        self._logs = config.run_dir / "logs"

    def start_mongodb(self) -> ManagedProcess:
        """nx-27017 on its own SQLite directory, PID file and log (it refuses to share them),
        through ``devstack.nx_server``, which corrects how it stores updated dates and flags."""
        run = self.config.run_dir
        (run / "mongodb").mkdir(parents=True, exist_ok=True)
        process = self._spawn("mongodb", [
            *python_module("devstack.nx_server"), "--data-dir", str(run / "mongodb"),
            "--host", "127.0.0.1",
            "-p", str(self.config.mongodb_port), "--pid-file", str(run / "nx-27017.pid"),
            "--log-file", str(run / "logs" / "nx-27017.internal.log")], os.environ.copy())
        wait_until(self._mongodb_answers, 30, "nx-27017 to answer", process=process)
        return process

    def _mongodb_answers(self) -> bool:
        if not port_open(self.config.mongodb_port):
            return False
        try:
            with MongoClient(self.config.mongodb_url, document_class=dict,
                             serverSelectionTimeoutMS=500) as client:
                client.admin.command("ping")
        except PyMongoError:
            return False
        return True

    def start_emulator(self) -> ManagedProcess:
        config = self.config
        accounts = [config.service_account(name) for name in (None, *config.service_accounts)] \
            if config.oauth else []
        process = self._spawn("fcm-emulator", python_module(
            "fcm_emulator", "--port", str(config.fcm_port),
            *(arg for path in accounts for arg in ("--service-account", str(path)))),
            os.environ.copy())
        wait_until(lambda: http_ok(f"{self.config.fcm_url}/healthz"), 20,
                   "the FCM emulator", process=process)
        return process

    def start_service(self, service: str, name: str | None = None,
                      **env: str) -> ManagedProcess:
        """Start one service; the api is waited for until ready, the others until healthy.
        Its metrics endpoint is recorded in ``metrics_targets`` (a worker's only when its
        ``HERALD_METRICS_PORT`` is given: 0 picks a port nobody is told)."""
        name = name or service
        overrides = {"HERALD_METRICS_PORT": "0", **env}
        if service == "api":
            bootstrap_key(self.config.run_dir)  # made before the api reads it
            overrides.setdefault("HERALD_BOOTSTRAP_API_KEY_FILE",
                                 str(self.config.run_dir / BOOTSTRAP_KEY_FILE))
        process = self._spawn(name, python_module(SERVICE_MODULES[service]),
                              self.config.service_env(**overrides))
        if service == "api":
            port = int(overrides.get("HERALD_API_PORT", self.config.api_port))
            wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 60, "the api",
                       process=process)
            self.metrics_targets.setdefault(service, []).append(f"127.0.0.1:{port}")
        elif overrides["HERALD_METRICS_PORT"] != "0":
            self.metrics_targets.setdefault(service, []).append(
                f"127.0.0.1:{overrides['HERALD_METRICS_PORT']}")
        return process

    def start(self, senders: int = 2, schedulers: int = 1, *, dispatchers: int = 1,
              apis: int = 1) -> None:
        """Everything, waiting until every worker has announced itself (its heartbeat). Every
        replica gets its own metrics port (``metrics_targets``); api replicas after the first
        listen on free ports (``api_urls``)."""
        if self.config.start_mongodb:
            self.start_mongodb()
        self.start_emulator()
        self.start_apis(apis)
        for service, count in (("dispatcher", dispatchers), ("sender", senders),
                               ("scheduler", schedulers)):
            for index in range(1, count + 1):
                self.start_service(service, replica_name(service, index),
                                   HERALD_METRICS_PORT=str(free_port()))
        self.wait_for_pods({"dispatcher": dispatchers, "sender": senders,
                            "scheduler": schedulers})

    def start_apis(self, count: int) -> None:
        """``count`` api replicas: ``api`` on the configured port, ``api-2``... on free ones."""
        self.start_service("api")
        for index in range(2, count + 1):
            port = free_port()
            self.start_service("api", f"api-{index}", HERALD_API_PORT=str(port))
            self.api_urls.append(f"http://127.0.0.1:{port}")

    def wait_for_pods(self, expected: dict[str, int], timeout_s: float = 60) -> None:
        """Wait until the api lists at least ``expected`` live pods per service."""
        def enough() -> bool:
            try:
                pods = httpx.get(f"{self.config.api_url}/v1/pods", timeout=2,
                                 headers=self.config.api_headers()).json()["pods"]
            except (httpx.HTTPError, KeyError, ValueError):
                return False
            live = Counter(pod["service"] for pod in pods)
            return all(live[service] >= count for service, count in expected.items())
        wait_until(enough, timeout_s, f"pods {expected} to announce themselves")

    def stop(self, timeout_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every process, services first (all at once: each finishes its graceful stop
        in parallel) and the stores last; their exit codes."""
        stores = [name for name in ("fcm-emulator", "mongodb") if name in self.processes]
        services = [name for name in self.processes if name not in stores]
        for name in services:
            self.processes[name].request_stop()
        codes = {name: self.processes[name].wait_stopped(timeout_s) for name in services}
        codes.update({name: self.processes[name].terminate(timeout_s) for name in stores})
        return codes

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
        process = spawn(name, argv, env, self._logs, cwd=REPO)
        self.processes[name] = process
        return process
