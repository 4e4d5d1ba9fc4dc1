"""A real Prometheus (Debian's ``prometheus``) scraping a running stack every second with Herald's
alert rules loaded, and the queries of the Grafana dashboard, with Grafana's variables filled in
as Grafana would fill them."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from devstack.processes import ManagedProcess, free_port, spawn, wait_until
from devstack.stack import REPO

PROMETHEUS = shutil.which("prometheus")
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "herald.json"
SCRAPE_INTERVAL = "1s"
GRAFANA_INTERVALS = {"__rate_interval": "15s", "__interval": "2s", "__range": "5m"}
"""Grafana's own variables for a 1 s scrape: ``$__rate_interval`` is at least four scrapes
(a few more here, so one late scrape cannot leave a window with a single sample)."""
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def config(targets: dict[str, list[str]]) -> dict[str, Any]:
    """Scrape every service's ``/metrics`` at 1 s (job = service), Herald's rules loaded."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL,
                   "scrape_timeout": SCRAPE_INTERVAL},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": service, "metrics_path": "/metrics",
                            "static_configs": [{"targets": addresses}]}
                           for service, addresses in sorted(targets.items())],
    }


class Prometheus:
    """One Prometheus process on a free port, its data in ``run_dir``."""

    def __init__(self, run_dir: Path, targets: dict[str, list[str]]) -> None:
        assert PROMETHEUS is not None, "Debian's prometheus package is not installed"
        run_dir.mkdir(parents=True, exist_ok=True)
        config_path = run_dir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config(targets)))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process: ManagedProcess = spawn("prometheus", [
            PROMETHEUS, f"--config.file={config_path}",
            f"--storage.tsdb.path={run_dir / 'data'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
            "--log.level=warn"], {}, run_dir / "logs")
        self.http = httpx.Client(base_url=self.url, timeout=10)
        wait_until(self._ready, 30, "Prometheus to be ready", process=self.process)

    def _ready(self) -> bool:
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The series an instant query returns now."""
        response = self.http.get("/api/v1/query", params={"query": expr})
        body = response.json()
        assert body["status"] == "success", (expr, body)
        return list(body["data"]["result"])

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus has samples of."""
        return set(self.http.get("/api/v1/label/__name__/values").json()["data"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.http.get("/api/v1/rules").json()["data"]["groups"])

    def close(self) -> None:
        self.http.close()
        self.process.terminate(timeout_s=10)


def _panels(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in node.get("panels", []):
        yield panel
        yield from _panels(panel)  # rows carry their panels inside


def _variable_values(dashboard: dict[str, Any]) -> dict[str, str]:
    values = dict(GRAFANA_INTERVALS)
    for variable in dashboard.get("templating", {}).get("list", []):
        current = variable.get("current", {}).get("value")
        if isinstance(current, list) or current in (None, "$__all"):
            current = ".*"  # "All": every value, as Grafana's regex matcher sees it
        values[variable["name"]] = str(current)
    return values


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard, variables substituted."""
    dashboard = json.loads(path.read_text())
    values = _variable_values(dashboard)

    def substitute(expr: str) -> str:
        return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)

    return [(panel.get("title", "?"), substitute(target["expr"]))
            for panel in _panels(dashboard)
            for target in panel.get("targets", []) if target.get("expr")]


def alert_rule_names(path: Path = ALERTS) -> set[str]:
    rules = yaml.safe_load(path.read_text())
    return {rule["alert"] for group in rules["groups"] for rule in group["rules"]
            if "alert" in rule}


def alert_metric_names(path: Path = ALERTS) -> set[str]:
    """The Herald metrics the alert rules read (histogram series by their family's name)."""
    names = set(re.findall(r"herald_\w+", path.read_text()))
    return {re.sub(r"_(bucket|count|sum)$", "", name) for name in names}
