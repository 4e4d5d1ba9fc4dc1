"""The Grafana dashboard and the alert rules, proven on a real Prometheus (Debian's package)
scraping a running stack every second: after a campaign through a 429 storm, a cancel and a
scheduled campaign that fires, every query of the dashboard returns a series, and every alert
rule is loaded and evaluates without error."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api, devices
from tests.e2e.prometheus import (
    Prometheus,
    alert_metric_names,
    alert_rule_names,
    dashboard_queries,
)
from tests.support import wait_for

STORM_LIMIT_S = 30
"""FCM answers every request with 429 QUOTA_EXCEEDED from the campaign's start until the
emulator has refused some (then the storm is lifted), at most this long."""


@pytest.fixture
def prometheus(stack: Stack, tmp_path: Path) -> Iterator[Prometheus]:
    stack.start(senders=2, schedulers=1)
    server = Prometheus(tmp_path / "prometheus", stack.metrics_targets)
    yield server
    server.close()


def _scraped_every_service(prometheus: Prometheus) -> bool:
    up = prometheus.query("up == 1")
    return {series["metric"]["job"] for series in up} >= {"api", "dispatcher", "sender",
                                                          "scheduler"}


def _run_the_story(api: Api, emulator: EmulatorClient) -> None:
    """A campaign through a 429 storm (with tokens FCM refuses), a cancel, a schedule that
    fires; each finished."""
    api.import_devices(devices(2_000))
    emulator.configure(push_back={"error": "QUOTA_EXCEEDED", "for_s": STORM_LIMIT_S,
                                  "retry_after_s": 1})
    sent = api.create_campaign()
    wait_for(lambda: any(r.error == "QUOTA_EXCEEDED" for r in emulator.received()), 20,
             "FCM to push back")
    emulator.configure(push_back=None)
    cancelled = api.create_campaign()
    answer = api.http.post(f"/v1/campaigns/{cancelled}/cancel", json={"reason": "test"})
    assert answer.status_code in (200, 202), answer.text
    due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    scheduled = api.create_campaign(send_at=due.isoformat())
    assert api.wait_finished(sent, timeout_s=30)["status"] == "completed"
    assert api.wait_finished(cancelled, timeout_s=10)["status"] == "cancelled"
    assert api.wait_finished(scheduled, timeout_s=30)["status"] == "completed"


def test_every_dashboard_query_has_data_and_every_alert_rule_loads(
        prometheus: Prometheus, api: Api, emulator: EmulatorClient) -> None:
    wait_for(lambda: _scraped_every_service(prometheus), 20, "every service to be scraped")
    _run_the_story(api, emulator)
    queries = dashboard_queries()
    assert len(queries) >= 29

    def empty() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in queries if not prometheus.query(expr)]

    # each query must see the story's samples (scraped once a second): wait until all do
    missing: list[tuple[str, str]] = []

    def all_answered() -> bool:
        missing[:] = empty()
        return not missing
    try:
        wait_for(all_answered, 20, "every dashboard query to return a series", interval_s=1)
    except AssertionError:
        pytest.fail(f"dashboard queries without a series: {missing}")

    def rules_healthy() -> list[dict[str, object]] | None:
        rules = [rule for group in prometheus.rule_groups() for rule in group["rules"]]
        evaluated = all(rule["health"] == "ok" for rule in rules)
        return rules if evaluated and rules else None
    rules = wait_for(rules_healthy, 10, "every rule to evaluate without error", interval_s=0.5)
    assert {rule["name"] for rule in rules if rule["type"] == "alerting"} == alert_rule_names()
    scraped = {re.sub(r"_(bucket|count|sum|created)$", "", name)
               for name in prometheus.metric_names()}
    assert alert_metric_names() <= scraped, "alerts read metrics no service exports"
