"""What end-to-end tests do over and over: import devices, run a campaign, read the audit."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import orjson

from fcm_emulator.client import EmulatorClient, Received
from tests.support import wait_for

TERMINAL = {"completed", "failed", "cancelled", "missed"}


class Api:
    """The HTTP API as a test uses it: every call carries ``key`` (by default the stack's admin
    key; ``as_key`` gives a client for another one)."""

    def __init__(self, base_url: str, key: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60.0,
                                 headers={"Authorization": f"Bearer {key}"})

    def as_key(self, key: str) -> Api:
        return Api(str(self.http.base_url), key)

    def mint_key(self, role: str, name: str | None = None, owner: str | None = None) -> str:
        """A new key of ``role`` for ``owner`` (the caller must be an admin; None: the
        caller's own person); its secret."""
        body = {"name": name or f"test-{role}", "role": role}
        if owner is not None:
            body["owner"] = owner
        response = self.http.post("/v1/api-keys", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["secret"])

    def import_devices(self, devices: list[dict[str, Any]]) -> None:
        """``devices`` registered, opted in to marketing unless they say otherwise: a campaign
        is marketing unless it says otherwise (docs/http-api.md#purpose)."""
        for start in range(0, len(devices), 10_000):
            batch = [{"marketing_enabled": True, **device}
                     for device in devices[start:start + 10_000]]
            response = self.http.post("/v1/devices/bulk", json={"devices": batch})
            response.raise_for_status()

    def create_campaign(self, **body: Any) -> str:
        response = self.http.post("/v1/campaigns", json={"title": "Hello", "body": "World", **body})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def campaign(self, campaign_id: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/campaigns/{campaign_id}")
        response.raise_for_status()
        return dict(response.json())

    def wait_until(self, campaign_id: str, statuses: set[str],
                   timeout_s: float = 60.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            campaign = self.campaign(campaign_id)
            return campaign if campaign["status"] in statuses else None
        return wait_for(reached, timeout_s, f"campaign {campaign_id} to reach {statuses}")

    def wait_finished(self, campaign_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
        return self.wait_until(campaign_id, TERMINAL, timeout_s)

    def audit(self, campaign_id: str, outcome: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/v1/campaigns/{campaign_id}/recipients",
                                 params={"outcome": outcome})
        response.raise_for_status()
        return [orjson.loads(line) for line in response.content.splitlines()]

    def audit_tokens(self, campaign_id: str, outcome: str) -> list[str]:
        return [line["token"] for line in self.audit(campaign_id, outcome)]


def devices(count: int, *, push_disabled_every: int | None = 5,
            unregistered_every: int | None = 33, invalid_every: int | None = 101,
            prefix: str = "d") -> list[dict[str, Any]]:
    """Synthetic devices; every n-th has push disabled or a token FCM refuses (None: none)."""
    def every(n: int | None, i: int, offset: int = 0) -> bool:
        return n is not None and i % n == offset

    out = []
    for i in range(count):
        token = f"{prefix}{i:06d}-" + "x" * 120
        if every(unregistered_every, i):
            token = "unregistered-" + token
        elif every(invalid_every, i):
            token = "invalid-" + token
        out.append({"token": token, "user_id": f"user-{i}", "platform": "android",
                    "push_enabled": not every(push_disabled_every, i, 1)})
    return out


def reachable_devices(count: int) -> list[dict[str, Any]]:
    """Devices that all have push enabled and a token FCM accepts."""
    return devices(count, push_disabled_every=None, unregistered_every=None, invalid_every=None)


def assert_bodies_conform(fcm_url: str) -> None:
    """Every request body the emulator received since it started followed Google's FCM v1
    description (the discovery document it validates against)."""
    emulator = EmulatorClient(fcm_url)
    try:
        stats = emulator.stats()
    finally:
        emulator.close()
    assert stats["violations_ever"] == 0, (
        f"{stats['violations_ever']} request bodies broke Google's FCM v1 description: "
        f"{stats['violation_samples']}")


def accepted(received: list[Received]) -> Counter[str]:
    return Counter(r.token for r in received if r.accepted)


def requests_per_token(emulator: EmulatorClient) -> Counter[str]:
    return Counter(r.token for r in emulator.received())


def dead(token: str) -> bool:
    return token.startswith(("unregistered-", "invalid-"))


def elapsed_since(started: float) -> float:
    return time.monotonic() - started


def pod_metric(api: Api, service: str, metric: str, **labels: str) -> float:
    """Sum of a metric's samples over the live pods of ``service`` (each pod's own /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for pod in api.http.get("/v1/pods").json()["pods"]:
        if pod["service"] != service:
            continue
        text = httpx.get(f"http://127.0.0.1:{pod['metrics_port']}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            total += sum(s.value for s in family.samples
                         if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()))
    return total
