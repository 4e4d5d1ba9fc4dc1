"""Access control across processes: a key revoked through one api replica is refused by every
replica within a second (each trusts a key it found valid for at most half a second)."""

from __future__ import annotations

import time

import httpx

from devstack.processes import free_port, http_ok, wait_until
from devstack.stack import Stack
from tests.e2e.harness import Api

REVOCATION_DEADLINE_S = 1.0


def test_a_key_revoked_on_one_replica_is_refused_by_both_within_a_second(
        stack: Stack, api: Api) -> None:
    stack.start_service("api")
    second_port = free_port()
    stack.start_service("api", "api-2", HERALD_API_PORT=str(second_port))
    wait_until(lambda: http_ok(f"http://127.0.0.1:{second_port}/readyz"), 60, "the second api")
    secret = api.mint_key("viewer", "revoked soon")
    key_id = secret.split("_")[1]
    replicas = [httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"})
                for url in (stack.config.api_url, f"http://127.0.0.1:{second_port}")]
    try:
        for replica in replicas:  # both know the key now (and cache it)
            assert replica.get("/v1/campaigns").status_code == 200
        assert api.http.delete(f"/v1/api-keys/{key_id}").status_code == 200
        revoked_at = time.monotonic()
        refused_after = [_refused_after(replica, revoked_at) for replica in replicas]
    finally:
        for replica in replicas:
            replica.close()
    assert max(refused_after) <= REVOCATION_DEADLINE_S, refused_after


def _refused_after(replica: httpx.Client, since: float) -> float:
    """Seconds from ``since`` until ``replica`` answers 401 (polled every 20 ms)."""
    deadline = since + 5 * REVOCATION_DEADLINE_S
    while time.monotonic() < deadline:
        if replica.get("/v1/campaigns").status_code == 401:
            return time.monotonic() - since
        time.sleep(0.02)
    return float("inf")
