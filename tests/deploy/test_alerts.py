"""Herald's Prometheus alerts: promtool checks the rules and the config and runs the unit tests in
deploy/prometheus/tests/; these tests also hold every alert to the house rules (a unit test that
fires it and one that keeps it quiet, a severity, numbers in the description, a runbook that
exists in deploy/README.md, only metrics Herald defines, counters only under rate/increase).

promtool comes with Debian's ``prometheus`` package, which deploy/local/ensure-services.sh installs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.promql import metric_names, series_names

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
ALERTS_FILE = PROMETHEUS / "alerts.yml"
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
RUNBOOKS = REPO / "deploy" / "README.md"
SEVERITIES = ("critical", "warning", "info")
SEED_000_METRICS = ("herald_cancel_latency_seconds_bucket", "herald_cancel_sent_ratio_sum",
                    "herald_cancel_flags", "herald_cancellations_without_request")


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


RULES = [rule for group in _load(ALERTS_FILE)["groups"] for rule in group["rules"]]
ALERTS = {rule["alert"]: rule for rule in RULES if "alert" in rule}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, ("promtool is missing: run deploy/local/ensure-services.sh (Debian: apt-get "
                    "install --no-install-recommends prometheus)")
    return subprocess.run([binary, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)


# --- promtool --------------------------------------------------------------------------------------

def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", str(ALERTS_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in result.stdout


def test_promtool_checks_the_compose_config_and_its_rule_files() -> None:
    result = _promtool("check", "config", str(PROMETHEUS / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_the_compose_prometheus_loads_the_alerts() -> None:
    assert _load(PROMETHEUS / "prometheus.yml")["rule_files"] == [ALERTS_FILE.name]


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda path: path.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# --- every alert -----------------------------------------------------------------------------------

def _rule_test_cases() -> dict[str, dict[str, int]]:
    """alert -> how many evaluations expect it to fire, and how many expect silence."""
    cases: dict[str, dict[str, int]] = {}
    for path in RULE_TESTS:
        spec = _load(path)
        assert spec["rule_files"] == ["../alerts.yml"], path
        for test in spec["tests"]:
            for check in test.get("alert_rule_test", []):
                kind = "fires" if check.get("exp_alerts") else "quiet"
                counted = cases.setdefault(check["alertname"], {"fires": 0, "quiet": 0})
                counted[kind] += 1
    return cases


def test_the_rule_tests_name_only_existing_alerts() -> None:
    assert set(_rule_test_cases()) <= set(ALERTS)


@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_is_tested_firing_and_quiet(alert: str) -> None:
    cases = _rule_test_cases().get(alert, {"fires": 0, "quiet": 0})
    assert cases["fires"] >= 1, f"no promtool test makes {alert} fire"
    assert cases["quiet"] >= 1, f"no promtool test keeps {alert} quiet"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in headings}


@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_says_what_how_bad_and_what_to_do(alert: str) -> None:
    rule = ALERTS[alert]
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    if not rule["expr"].strip().startswith("absent("):  # absent() has no number to tell
        assert "{{ $value" in annotations["description"], f"{alert}: give the numbers"
    page, _, anchor = annotations["runbook_url"].partition("#")
    assert page == "deploy/README.md"
    assert anchor == alert.lower()
    assert anchor in _anchors(RUNBOOKS.read_text()), f"deploy/README.md has no runbook #{anchor}"


@pytest.mark.parametrize("alert", ALERTS)
def test_alerts_use_herald_metrics_correctly(alert: str) -> None:
    series, expr = series_names(), ALERTS[alert]["expr"]
    names = metric_names(expr)
    assert names, f"{alert} selects no metric"
    for name in names:
        assert name in series, f"{alert}: {name} is not a metric Herald defines"
        if series[name] == "counter":  # every use of it under rate() or increase() with a range
            uses = re.findall(rf"\b{name}\b", expr)
            ranged = re.findall(rf"\b(?:rate|increase)\(\s*{name}\s*(?:\{{[^}}]*\}})?\s*\[", expr)
            assert len(ranged) == len(uses), f"{alert}: counter {name} outside rate()/increase()"


def test_seed_000s_four_alerts_exist() -> None:
    used = {name for rule in ALERTS.values() for name in metric_names(rule["expr"])}
    assert set(SEED_000_METRICS) <= used
