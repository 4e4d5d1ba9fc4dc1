"""Issue 20's conformance tier, part two: the OAuth lifecycle as production runs it, a service
account's JWT-bearer grant at its ``token_uri`` (the emulator's token endpoint, which verifies
the RS256 signature with the account's public key), on a stack of its own.

Two senders in odd time zones (google-auth gives a naive UTC expiry: read as local time it
meant one grant per message in Tokyo and expired tokens in Los Angeles), each with a service
account of its own so that the emulator tells their grants apart; tokens that live 60 s (Google
gives 3,600 s), and a token endpoint that stalls 8 s while a campaign sends; then a token
endpoint that refuses."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald.adapters.oauth import BACKOFF_FIRST_S
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

pytestmark = pytest.mark.conformance

LIFETIME_S = 20
STALL_S = 8.0
RATE_PER_S = 100
DEVICES = 2_600
"""At 100/s the campaign outlives the first tokens (20 s): an expired one would be refused."""
ZONES = {"sender-1": ("tokyo", "Asia/Tokyo"), "sender-2": ("la", "America/Los_Angeles")}


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    module_stack.config.service_accounts = tuple(account for account, _ in ZONES.values())
    module_stack.start_emulator()
    module_stack.start_apis(1)
    module_stack.start_service("dispatcher")
    for name, (account, zone) in ZONES.items():
        module_stack.start_service("sender", name, TZ=zone, HERALD_FCM_CREDENTIALS=str(
            module_stack.config.service_account(account)))
    module_stack.wait_for_pods({"dispatcher": 1, "sender": 2})
    return module_stack


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[Api]:
    client = Api(stack.config.api_url, stack.config.api_key)
    yield client
    client.http.close()


@pytest.fixture(scope="module")
def emulator(stack: Stack) -> Iterator[EmulatorClient]:
    client = EmulatorClient(stack.config.fcm_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def tokens(api: Api) -> set[str]:
    """Every device of the stack (the campaigns here target them all)."""
    population = reachable_devices(DEVICES)
    api.import_devices(population)
    return {device["token"] for device in population}


def grants_by_account(emulator: EmulatorClient) -> Counter[str]:
    return Counter(grant.client_email.split("@")[0] for grant in emulator.grants())


def longest_gap_s(rows: list[Received]) -> float:
    arrivals = sorted(row.received_at for row in rows)
    return max((b - a for a, b in itertools.pairwise(arrivals)), default=0.0)


def test_tokens_are_read_in_utc_renewed_ahead_and_a_stalled_endpoint_pauses_nothing(
        api: Api, emulator: EmulatorClient, tokens: set[str]) -> None:
    emulator.configure(token_endpoint={"expires_in_s": LIFETIME_S})
    campaign_id = api.create_campaign(rate_per_s=RATE_PER_S, chunk_size=100)
    wait_for(lambda: set(grants_by_account(emulator)) == {"herald-tokyo", "herald-la"}, 60,
             "both senders to have a token")
    emulator.configure(token_endpoint={"expires_in_s": LIFETIME_S, "stall_s": STALL_S})
    # Each sender renews at half life (10 s): that grant hangs 8 s, past the old token's
    # renewal point but not its expiry; the ones after it are answered at once again.
    wait_for(lambda: len(emulator.grants()) > 2 or emulator.stats()["requests"] > DEVICES // 2,
             60, "a renewal to be asked for")
    emulator.configure(token_endpoint={"expires_in_s": LIFETIME_S, "stall_s": 0})
    campaign = api.wait_finished(campaign_id, timeout_s=120)

    assert campaign["status"] == "completed", campaign
    assert campaign["counts"]["sent"] == DEVICES and campaign["counts"]["failed"] == 0
    rows = emulator.received()
    assert {row.token for row in rows if row.accepted} == tokens
    assert not [row for row in rows if row.auth_error == "expired"], "an expired token was sent"
    duration_s = max(r.received_at for r in rows) - min(r.received_at for r in rows)
    most = 2 * (int(duration_s // LIFETIME_S) + 1)
    for account, count in grants_by_account(emulator).items():
        assert count <= most, f"{account}: {count} grants in {duration_s:.0f} s"
    # The campaign's rate limit spaces requests out by up to ~2 s (blocks of 64 tokens at
    # 100/s, two senders); a token endpoint on the sending path would stop it for 8 s.
    assert longest_gap_s(rows) < 5, "sending paused"


def test_a_refusing_token_endpoint_stops_the_campaign_after_a_handful_of_grants(
        api: Api, emulator: EmulatorClient, tokens: set[str]) -> None:
    emulator.reset()
    emulator.configure(latency_ms=20, token_endpoint={"refuse": "invalid_grant"},
                       revoke_tokens=True)  # the senders' next requests meet a 401
    campaign_id = api.create_campaign()
    campaign = api.wait_finished(campaign_id, timeout_s=60)

    assert campaign["status"] == "failed" and "invalid_grant" in campaign["error"], campaign
    counts = campaign["counts"]
    assert counts["sent"] == 0 and counts["failed"] == 0  # nobody reached: all of them unsent
    assert counts["unsent"] == counts["targeted"] == DEVICES
    grants = emulator.grants()
    assert 1 <= len(grants) <= 20 and not any(grant.granted for grant in grants)
    estimate = api.http.post("/v1/audiences/estimate", json={"audience": {}}).json()
    assert estimate["devices"] == DEVICES, "a refused grant retired tokens"

    emulator.configure(token_endpoint={"refuse": None})  # fixed
    # Each sender asks again only after its back-off (nothing outside it can be watched).
    time.sleep(BACKOFF_FIRST_S + 1)
    retried = api.http.post(f"/v1/campaigns/{campaign_id}/retry")
    assert retried.status_code == 202, retried.text
    follow_up = api.wait_finished(retried.json()["id"], timeout_s=60)
    assert follow_up["status"] == "completed" and follow_up["counts"]["sent"] == DEVICES
    assert {row.token for row in emulator.received() if row.accepted} == tokens
