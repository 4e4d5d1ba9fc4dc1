"""Inputs that cannot hurt the api, and device data that follows the role table (issue 31,
points 3 and 4), against a real api process: a 60 KB locale refused at registration and a
35-character one handled in microseconds; a responder's cancel answered within 100 ms while an
operator's largest allowed create is checked; a viewer cannot use estimates as an oracle."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from devstack.stack import Stack
from herald.domain.locales import best_match
from tests.e2e.harness import Api
from tests.factories import largest_campaign

CANCEL_TARGET_MS = 100.0
"""The issue's figure: a responder's cancel during the largest allowed create."""
LOOSE_MS = 300.0
"""What no cancel may take even on a loaded machine (2 cores shared; the figures are printed)."""


@pytest.fixture(scope="module")
def api_stack(module_stack: Stack) -> Stack:
    module_stack.start_service("api")
    return module_stack


@pytest.fixture
def admin(api_stack: Stack) -> Iterator[Api]:
    client = Api(api_stack.config.api_url, api_stack.config.api_key)
    yield client
    client.http.close()


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f})"


# --- locales -------------------------------------------------------------------------------------
def test_a_60_kb_locale_is_refused_and_a_35_character_one_handled_in_microseconds(
        admin: Api) -> None:
    huge = "es-" + "-".join(["abcdefgh"] * 6666)
    refused = admin.http.post("/v1/devices", json={"token": "tok-locale-60kb",
                                                   "platform": "android", "locale": huge})
    assert refused.status_code == 422, refused.text[:300]
    assert "at most 35 characters" in refused.json()["error"]["message"]
    assert len(refused.content) < 2000

    longest = "zh-Hant-TW-" + "-".join(["abcdefgh"] * 2) + "-abcdef"
    assert len(longest) == 35
    assert admin.http.post("/v1/devices", json={"token": "tok-locale-35", "platform": "android",
                                                "locale": longest, "marketing_enabled": True,
                                                "topics": ["inputs-e2e-35"]}).status_code == 201
    started = time.perf_counter()
    estimate = admin.http.post("/v1/audiences/estimate", json={
        "audience": {"topics": ["inputs-e2e-35"]}, "languages": ["zh-Hant", "zh", "es"]})
    estimate_ms = (time.perf_counter() - started) * 1000
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["by_language"] == {"zh-Hant": 1}

    calls = 5000
    started = time.perf_counter()
    for _ in range(calls):
        best_match(longest, ["zh-Hant", "zh", "es"])
    lookup_us = (time.perf_counter() - started) / calls * 1e6
    print(f"\n35-character locale: lookup {lookup_us:.1f} µs, the estimate that splits by it "
          f"{estimate_ms:.0f} ms over HTTP; {_load()}")
    assert lookup_us < 200


# --- a cancel during the largest create ----------------------------------------------------------
def _scheduled(admin: Api, count: int) -> list[str]:
    return [admin.create_campaign(name=f"inputs-cancel-{i}", send_at="2099-01-01T00:00:00Z")
            for i in range(count)]


def _cancel_ms(responder: Api, campaign_id: str) -> float:
    started = time.perf_counter()
    response = responder.http.post(f"/v1/campaigns/{campaign_id}/cancel",
                                   json={"reason": "inputs e2e"})
    took_ms = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    return took_ms


def test_a_responders_cancel_is_answered_within_100_ms_during_the_largest_create(
        admin: Api) -> None:
    """The largest allowed create: 3.8 MB at every limit, 101 variants of 50 placeholders each
    in the shape only Jinja2's parser checks (about 2 s of checks in a worker thread). A
    responder cancels one scheduled campaign after another meanwhile."""
    responder = admin.as_key(admin.mint_key("responder", "inputs-e2e-responder"))
    targets = iter(_scheduled(admin, 60))
    baseline = [_cancel_ms(responder, next(targets)) for _ in range(5)]
    body = json.dumps(largest_campaign(placeholders=True)).encode()  # escaped: the most bytes
    answer: dict[str, object] = {}

    def create() -> None:
        started = time.perf_counter()
        with httpx.Client(base_url=str(admin.http.base_url), timeout=120,
                          headers=dict(admin.http.headers)) as client:
            response = client.post("/v1/campaigns", content=body,
                                   headers={"Content-Type": "application/json"})
        answer.update(status=response.status_code, text=response.text[:300],
                      took_s=time.perf_counter() - started)

    creating = threading.Thread(target=create)
    creating.start()
    during: list[float] = []
    try:
        while creating.is_alive():
            during.append(_cancel_ms(responder, next(targets)))
            time.sleep(0.05)
    finally:
        creating.join()
        responder.http.close()
    assert answer["status"] == 202, answer
    during = during[:-1]  # the last one may have started after the create was answered
    median = statistics.median(during)
    print(f"\nthe largest create ({len(body):,} bytes) took {answer['took_s']:.2f} s; "
          f"{len(during)} cancels meanwhile: median {median:.0f} ms, max {max(during):.0f} ms "
          f"(alone: median {statistics.median(baseline):.0f} ms); {_load()}")
    assert len(during) >= 3
    assert median <= CANCEL_TARGET_MS
    assert max(during) <= LOOSE_MS


# --- device data ---------------------------------------------------------------------------------
def test_a_viewers_estimate_oracle_is_refused(admin: Api) -> None:
    """The red team's oracle: a viewer narrowing a range on one user's e-mail attribute, 130
    counts to read it. Now its first question is refused, and every other way to name a
    device; fleet-wide counts still answer."""
    admin.import_devices([{"token": "tok-oracle-ann", "user_id": "oracle-ann",
                           "platform": "android", "topics": ["oracle-ann"],
                           "attributes": {"email": "ann@example.com"}}])
    viewer = admin.as_key(admin.mint_key("viewer", "inputs-e2e-viewer"))
    questions = [{"user_ids": ["oracle-ann"], "attributes": {"email": {"gte": "a", "lt": "n"}}},
                 {"attributes": {"email": {"gte": "ann@", "lt": "ann@f"}}},
                 {"topics": ["oracle-ann"]}]
    try:
        for audience in questions:
            refused = viewer.http.post("/v1/audiences/estimate", json={"audience": audience})
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "forbidden"
            assert "devices:read" in refused.json()["error"]["message"]
        fleet = viewer.http.post("/v1/audiences/estimate",
                                 json={"audience": {"platforms": ["android"]}})
        assert fleet.status_code == 200 and fleet.json()["devices"] >= 1
        operator = admin.as_key(admin.mint_key("operator", "inputs-e2e-operator"))
        counted = operator.http.post("/v1/audiences/estimate",
                                     json={"audience": {"user_ids": ["oracle-ann"]}})
        assert counted.json()["devices"] == 1
        operator.http.close()
    finally:
        viewer.http.close()
