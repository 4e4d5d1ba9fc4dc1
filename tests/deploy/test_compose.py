"""The Docker Compose deployment, checked without a Docker engine.

No engine runs here, so these tests read docker-compose.yml, the Dockerfile, prometheus.yml and the
Grafana provisioning statically: every service, its command, environment, dependencies and health
checks, and every PromQL expression of the dashboard against the metrics Herald defines
(herald/observability.py, herald/adapters/fleet_gauges.py). Where Debian's ``docker-compose`` (1.29) is
installed, ``docker-compose config -q`` validates the file against the Compose schema too; it
needs no engine. The alert rules have their own tests (test_alerts.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from herald.settings import Settings
from tests.deploy.promql import metric_names, series_names

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
PROMETHEUS_FILE = REPO / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))

STORES = ("mongodb", "rabbitmq", "redis")
EMULATOR = "fcm-emulator"
HERALD = ("api", "dispatcher", "sender", "scheduler")
ALL_SERVICES = (*STORES, EMULATOR, *HERALD, "prometheus", "grafana")
WORKER_METRICS_PORTS = {"dispatcher": 9101, "sender": 9102, "scheduler": 9103}
API_PORT = 8000
REQUIRED_ENV = ("HERALD_MONGODB_URL", "HERALD_RABBITMQ_URL", "HERALD_REDIS_URL",
                "HERALD_FCM_ENDPOINT", "HERALD_FCM_PROJECT_ID", "HERALD_GRACE_PERIOD_S")
URL_HOSTS = {"HERALD_MONGODB_URL": "mongodb", "HERALD_RABBITMQ_URL": "rabbitmq",
             "HERALD_REDIS_URL": "redis", "HERALD_FCM_ENDPOINT": EMULATOR}


# --- helpers -------------------------------------------------------------------------------------

def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


COMPOSE = _load_yaml(COMPOSE_FILE)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]

_INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


def _interpolate(value: str) -> str:
    """A Compose value as `docker compose up` sees it when the shell sets none of its variables."""
    def resolve(match: re.Match[str]) -> str:
        if match["bare"] or match["op"] is None:
            pytest.fail(f"{value!r}: a variable without a default is empty unless the shell sets it")
        if "?" in match["op"]:
            pytest.fail(f"{value!r}: a required variable stops a plain `docker compose up`")
        return match["default"]

    return _INTERPOLATION.sub(resolve, value.replace("$$", "\0")).replace("\0", "$")


def _environment(service: str) -> dict[str, str]:
    raw = SERVICES[service].get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    return {key: _interpolate(str(value)) for key, value in raw.items() if value is not None}


def _duration_s(text: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|h|m|s)", str(text))
    assert parts and "".join(n + u for n, u in parts) == str(text), f"bad duration {text!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def _healthcheck_command(service: str) -> list[str]:
    check = SERVICES[service].get("healthcheck") or {}
    test = check.get("test")
    assert test and not check.get("disable"), f"{service} has no healthcheck"
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    assert test[0] in ("CMD", "CMD-SHELL"), f"{service}: healthcheck test {test!r}"
    return [str(part) for part in test]


def _port(service: str) -> int:
    return API_PORT if service == "api" else WORKER_METRICS_PORTS[service]


# --- docker-compose.yml --------------------------------------------------------------------------

def test_every_service_is_defined() -> None:
    assert set(ALL_SERVICES) <= set(SERVICES)


def test_no_obsolete_version_key() -> None:
    assert "version" not in COMPOSE


@pytest.mark.parametrize("service", HERALD)
def test_command_is_exec_form(service: str) -> None:
    assert SERVICES[service]["command"] == ["python", "-m", f"services.{service}"]
    assert "entrypoint" not in SERVICES[service]


def test_emulator_command_is_exec_form_and_listens_on_every_interface() -> None:
    command = SERVICES[EMULATOR]["command"]
    assert isinstance(command, list)
    assert command[:3] == ["python", "-m", "fcm_emulator"]
    assert command[command.index("--host") + 1] == "0.0.0.0"


@pytest.mark.parametrize("service", [*HERALD, EMULATOR])
def test_built_from_the_project_dockerfile(service: str) -> None:
    build = SERVICES[service]["build"]
    assert (REPO / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    assert SERVICES[service]["image"] == SERVICES["api"]["image"]


@pytest.mark.parametrize("service", HERALD)
def test_environment_points_at_the_compose_services(service: str) -> None:
    env = _environment(service)
    assert set(REQUIRED_ENV) <= set(env), f"{service} misses {set(REQUIRED_ENV) - set(env)}"
    for name, host in URL_HOSTS.items():
        assert urlsplit(env[name]).hostname == host, f"{service}: {name}={env[name]}"
        assert host in SERVICES, f"{name} names {host}, which is not a compose service"
    emulator_port = SERVICES[EMULATOR]["command"][SERVICES[EMULATOR]["command"].index("--port") + 1]
    assert urlsplit(env["HERALD_FCM_ENDPOINT"]).port == int(emulator_port)
    assert urlsplit(env["HERALD_MONGODB_URL"]).path.strip("/"), "name the database in the URL"
    port_variable = "HERALD_API_PORT" if service == "api" else "HERALD_METRICS_PORT"
    assert int(env[port_variable]) == _port(service)


@pytest.mark.parametrize("service", HERALD)
def test_environment_is_valid_herald_settings(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HERALD_"):
            monkeypatch.delenv(name)
    for name, value in _environment(service).items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.mongodb_database == "herald"
    assert settings.fcm_credentials is None  # the emulator needs none


@pytest.mark.parametrize("service", HERALD)
def test_depends_on_healthy_stores(service: str) -> None:
    depends_on = SERVICES[service]["depends_on"]
    assert isinstance(depends_on, dict), "use the long form, with conditions"
    for store in STORES:
        assert depends_on[store]["condition"] == "service_healthy", f"{service} -> {store}"


def test_sender_waits_for_a_healthy_emulator() -> None:
    assert SERVICES["sender"]["depends_on"][EMULATOR]["condition"] == "service_healthy"


def test_every_dependency_has_a_healthcheck() -> None:
    for service, definition in SERVICES.items():
        depends_on = definition.get("depends_on") or {}
        for dependency in depends_on:
            assert dependency in SERVICES, f"{service} depends on unknown {dependency}"
            _healthcheck_command(dependency)
            if isinstance(depends_on, dict):
                assert depends_on[dependency]["condition"] == "service_healthy"


@pytest.mark.parametrize("service", HERALD)
def test_healthcheck_probes_the_service_port(service: str) -> None:
    command = _healthcheck_command(service)
    path = "readyz" if service == "api" else "healthz"
    assert f"http://127.0.0.1:{_port(service)}/{path}" in " ".join(command)
    assert command[:3] == ["CMD", "python", "-c"], "slim images have no curl: use Python"


@pytest.mark.parametrize("service", [*HERALD, EMULATOR])
def test_graceful_stop(service: str) -> None:
    definition = SERVICES[service]
    assert definition["stop_signal"] == "SIGTERM"
    assert definition["restart"] == "unless-stopped"
    grace_s = float(_environment("api")["HERALD_GRACE_PERIOD_S"])
    if service in HERALD:
        grace_s = float(_environment(service)["HERALD_GRACE_PERIOD_S"])
    assert _duration_s(definition["stop_grace_period"]) > grace_s


def test_sender_scales() -> None:
    sender = SERVICES["sender"]
    assert sender["deploy"]["replicas"] >= 2
    assert "ports" not in sender, "a fixed host port stops `--scale sender=N`"
    assert "container_name" not in sender


@pytest.mark.parametrize("service", HERALD)
def test_no_container_names(service: str) -> None:
    assert "container_name" not in SERVICES[service]


def test_api_port_published() -> None:
    published = [_interpolate(str(port)) for port in SERVICES["api"]["ports"]]
    assert published == [f"127.0.0.1:{API_PORT}:{API_PORT}"]


def _published(service: str) -> list[str]:
    return [_interpolate(str(port)) for port in SERVICES[service].get("ports") or []]


def test_only_the_api_is_published_by_default_and_on_loopback() -> None:
    """Issue 21: compose published the api, Prometheus and Grafana on every interface."""
    by_default = {name for name, definition in SERVICES.items()
                  if not definition.get("profiles") and _published(name)}
    assert by_default == {"api"}
    for name in SERVICES:
        assert all(port.startswith("127.0.0.1:") for port in _published(name)), name
    assert SERVICES["prometheus"]["profiles"] == SERVICES["grafana"]["profiles"] == ["monitoring"]
    assert not _published("prometheus")


def test_grafana_has_no_default_password_and_no_anonymous_viewers() -> None:
    env = _environment("grafana")
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env, "a password in the file is everyone's"
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    assert SERVICES["grafana"]["secrets"] == ["grafana_admin_password"]
    source = _interpolate(COMPOSE["secrets"]["grafana_admin_password"]["file"])
    assert source.startswith("./secrets/")  # ignored by git (.gitignore: /secrets/)


def test_bind_mounts_exist() -> None:
    for service, definition in SERVICES.items():
        for volume in definition.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith("."):
                assert (REPO / source).exists(), f"{service} mounts missing {source}"


def test_docker_compose_config_validates() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install --no-install-recommends "
                    "docker-compose): the Compose schema check `docker-compose config -q` did not run")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HERALD_", "COMPOSE_", "DOCKER_"))}
    result = subprocess.run([binary, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# --- Dockerfile ----------------------------------------------------------------------------------

def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_uses_exec_form_only() -> None:
    instructions = _dockerfile_instructions()
    entry = [(keyword, rest) for keyword, rest in instructions if keyword in ("CMD", "ENTRYPOINT")]
    assert entry, "the image needs a CMD"
    for keyword, rest in entry:
        try:
            argv = json.loads(rest)
        except json.JSONDecodeError:
            pytest.fail(f"{keyword} {rest} is shell form: SIGTERM would go to /bin/sh")
        assert isinstance(argv, list), f"{keyword} {rest}"
        assert argv, f"{keyword} {rest}"
        assert all(isinstance(arg, str) for arg in argv), f"{keyword} {rest}"
        assert argv[0] not in ("sh", "/bin/sh", "bash", "/bin/bash"), f"{keyword} runs a shell"


def test_dockerfile_basics() -> None:
    instructions = _dockerfile_instructions()
    first = dict(reversed(instructions))  # the first value of each keyword
    last = dict(instructions)
    assert first["FROM"] == "python:3.11-slim"
    assert last["STOPSIGNAL"] == "SIGTERM"
    assert last["USER"].split(":")[0] not in ("root", "0"), "run as a non-root user"
    assert "WORKDIR" in last
    runs = " ".join(rest for keyword, rest in instructions if keyword == "RUN")
    assert "pip install --no-cache-dir ." in runs


def test_dockerfile_installs_the_emulator_extra() -> None:
    """The image serves the FCM emulator, which reads Google's discovery document from
    google-api-python-client: the `emulator` extra of pyproject.toml must be in it."""
    runs = " ".join(rest for keyword, rest in _dockerfile_instructions() if keyword == "RUN")
    assert "['optional-dependencies']['emulator']" in runs


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".run"} <= ignored


# --- Prometheus ----------------------------------------------------------------------------------

def _scrape_targets() -> dict[str, list[tuple[str, int, str]]]:
    """service name -> (discovery kind, port, metrics path) of every job that scrapes it."""
    found: dict[str, list[tuple[str, int, str]]] = {}
    for job in _load_yaml(PROMETHEUS_FILE)["scrape_configs"]:
        path = job.get("metrics_path", "/metrics")
        for sd in job.get("dns_sd_configs") or []:
            for name in sd["names"]:
                found.setdefault(name, []).append(("dns", int(sd["port"]), path))
        for static in job.get("static_configs") or []:
            for target in static["targets"]:
                host, _, port = target.rpartition(":")
                found.setdefault(host, []).append(("static", int(port), path))
    return found


@pytest.mark.parametrize("service", HERALD)
def test_prometheus_scrapes_every_herald_service(service: str) -> None:
    targets = _scrape_targets().get(service)
    assert targets, f"prometheus.yml does not scrape {service}"
    for _, port, path in targets:
        assert port == _port(service)
        assert path.rstrip("/") == "/metrics"


def test_prometheus_discovers_every_sender_replica() -> None:
    assert {kind for kind, _, _ in _scrape_targets()["sender"]} == {"dns"}


def test_prometheus_config_and_alerts_are_mounted() -> None:
    mounts = SERVICES["prometheus"]["volumes"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    # prometheus.yml names its rule files relative to itself: they sit next to it in /etc/prometheus.
    for rule_file in _load_yaml(PROMETHEUS_FILE)["rule_files"]:
        assert f"./deploy/prometheus/{rule_file}:/etc/prometheus/{rule_file}:ro" in mounts


# --- Grafana -------------------------------------------------------------------------------------

SERIES = series_names()


def _panels(container: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in container.get("panels", []):
        found.append(panel)
        found.extend(_panels(panel))
    return found


def _expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in _panels(dashboard)
            for target in panel.get("targets", [])]


def _datasource_uid() -> str:
    provisioned = _load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")
    (datasource,) = provisioned["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    return str(datasource["uid"])


def test_one_dashboard_is_provisioned() -> None:
    assert len(DASHBOARDS) == 1
    provider = _load_yaml(GRAFANA / "provisioning" / "dashboards" / "herald.yml")["providers"][0]
    mounts = SERVICES["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboard_queries_the_provisioned_datasource(path: Path) -> None:
    uid = _datasource_uid()
    dashboard = json.loads(path.read_text())
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} queries nothing"
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert all(target["datasource"]["uid"] == uid for target in panel["targets"]), panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboard_promql_uses_herald_metrics_correctly(path: Path) -> None:
    for title, expr in _expressions(json.loads(path.read_text())):
        names = metric_names(expr)
        assert names, f"{title}: {expr} selects no metric"
        for name in names:
            assert name in SERIES, f"{title}: {name} is not a metric Herald defines"
            selector = re.search(rf"(\w+)\(\s*{name}\s*(\{{[^}}]*\}})?\s*(\[[^\]]+\])?", expr)
            if SERIES[name] == "counter":  # counters and histogram series: rate() or increase()
                assert selector, f"{title}: {name} outside a function in {expr}"
                assert selector[1] in ("rate", "increase"), f"{title}: {selector[0]}"
                assert selector[3], f"{title}: {name} needs a range in {expr}"
            else:  # a gauge: its value, never rate() of it
                assert not (selector and selector[3]), f"{title}: range over gauge {name}"
            if name.endswith("_bucket"):
                assert re.search(rf"histogram_quantile\(\s*0?\.\d+\s*,\s*sum by \(le(, \w+)*\) "
                                 rf"\(rate\({name}\[", expr), \
                    f"{title}: quantile of {name} must sum rates by le (and labels it splits by)"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboard_covers_what_operators_watch(path: Path) -> None:
    used = {name for _, expr in _expressions(json.loads(path.read_text()))
            for name in metric_names(expr)}
    wanted = {
        "herald_messages_total", "herald_fcm_request_seconds_bucket", "herald_fcm_retries_total",
        "herald_campaigns_finished_total", "herald_cancel_latency_seconds_bucket",
        "herald_cancel_sent_ratio_bucket", "herald_cancel_flags", "herald_cancel_unmatched_total",
        "herald_pods_live", "herald_chunks_dead_lettered_total", "herald_schedule_lag_seconds_bucket",
        "herald_rate_limit_wait_seconds_total", "herald_first_request_wait_seconds",
        "herald_first_request_seconds_bucket"}
    assert wanted <= used, f"missing panels for {sorted(wanted - used)}"


def test_the_lanes_row_splits_sends_and_first_requests_by_lane() -> None:
    expressions = [expr for _, expr in _expressions(json.loads(DASHBOARDS[0].read_text()))]
    assert "sum by (lane) (rate(herald_messages_total[$__rate_interval]))" in expressions
    assert "max by (lane) (herald_first_request_wait_seconds)" in expressions
    assert any(expr.startswith("histogram_quantile(0.95, sum by (le, lane) (rate("
                               "herald_first_request_seconds_bucket[") for expr in expressions)


def test_cancel_latency_panel_marks_the_target() -> None:
    dashboard = json.loads(DASHBOARDS[0].read_text())
    (panel,) = [p for p in _panels(dashboard) if p["type"] == "timeseries"
                and "herald_cancel_latency_seconds_bucket" in json.dumps(p.get("targets"))]
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"] != "off"
    assert 0.25 in [step["value"] for step in defaults["thresholds"]["steps"]]
