"""Issue 29's "every running campaign is seen", end to end on the shared fleet (api, dispatcher,
two senders) with the FCM emulator 5 ms away: with hundreds of campaigns capped at 1/s in
progress at once, a new uncapped campaign's first request starts within a second of its create
call, and a staged rollout created after them completes (the sweep that advances its waves
reads every running campaign, not the 100 oldest).

The issue says 1,000; this test runs 300, the most that fits in about 90 s of test time on the
2-core machine (2026-11-27, load average 10-11 from other sessions' suites): 300 were created
in 8.4 s, the new campaign's first request came 0.64 s after its create call, the rollout
completed in 12.8 s, the test's call 26 s and its teardown (300 cancels) 20 s. With 400 the
first request still came in 0.82 s, but the rollout took 55 s (call 79 s, teardown 32 s): its
waves advance one dispatcher sweep at a time, and each sweep's reads wait behind the ones every
capped campaign costs nx-27017 (a sender re-reads a campaign before each of its requests when
it sends at 1/s; the settler counts each paged campaign's chunks every 2.5 s). ``bench.sweep``
measures the sweep at 1,000 running campaigns.

The capped campaigns all reach the same 60 devices (at 1/s they still send when the test is
over), created through several operator keys at once (each key's budget of changes is 50/s,
bursting to 200) and cancelled at the end, so the shared fleet is idle for the next test. The
new campaign's and the rollout's devices are imported once the capped campaigns run: on
nx-27017 every audience read scans all devices, and with the 2,500 imported first creating 300
capped campaigns took 57 s instead of 7 s (each is counted at its creation and paged). Figures
come from the emulator's own record; what was measured is printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import TERMINAL, Api, reachable_devices
from tests.support import wait_for

CAPPED = 300
"""See the module's doc for why not 1,000."""
CAPPED_DEVICES = 240
"""Each capped campaign's audience: at 1/s it still sends when the test is over, however long
its waits take (60 devices ran out on a machine at a load average of 9: 278 of 300 still
running after 70 s, 2026-11-27)."""
KEYS = 10
"""Operator keys the capped campaigns are made (and cancelled) with: at most 100 each, within
every key's burst of changes (200) and of cancels (100)."""
THREADS = 8
FIRST_REQUEST_S = 1.0
LOAD_MARGIN = 1.5
"""How much slower than the issue's deadline a loaded 2-core machine may be."""
ROLLOUT_DEVICES = 2_000
NEW_DEVICES = 500

T = TypeVar("T")


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


class Operators:
    """``KEYS`` operator keys of the test's own, revoked at its end."""

    def __init__(self, admin: Api) -> None:
        self.admin = admin
        self.ids: list[str] = []
        self.clients: list[Api] = []
        for index in range(KEYS):
            response = admin.http.post("/v1/api-keys", json={"name": f"many-campaigns-{index}",
                                                              "role": "operator"})
            assert response.status_code == 201, response.text
            self.ids.append(str(response.json()["id"]))
            self.clients.append(admin.as_key(str(response.json()["secret"])))

    def each(self, count: int, call: Callable[[Api, int], T]) -> list[T]:
        """``call(client, i)`` for i in 0..count-1, spread over the keys, ``THREADS`` at once."""
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            return list(pool.map(lambda i: call(self.clients[i % KEYS], i), range(count)))

    def close(self) -> None:
        for key_id in self.ids:
            self.admin.http.delete(f"/v1/api-keys/{key_id}")
        for client in self.clients:
            client.http.close()


@pytest.fixture
def operators(api: Api) -> Iterator[Operators]:
    keys = Operators(api)
    yield keys
    keys.close()


@pytest.fixture
def capped(api: Api, operators: Operators) -> Iterator[list[str]]:
    """The capped campaigns a test starts; every one still running at its end is cancelled,
    so the shared fleet is idle for the next test."""
    started: list[str] = []
    yield started

    def cancel(client: Api, index: int) -> None:
        client.http.post(f"/v1/campaigns/{started[index]}/cancel", json={"reason": "test over"})
    operators.each(len(started), cancel)
    wait_for(lambda: not running(api, set(started)), 120, "the capped campaigns to end",
             interval_s=0.5)


def running(api: Api, ids: set[str]) -> set[str]:
    """Which of ``ids`` are not finished (a listing of every campaign, 200 a page)."""
    unfinished: set[str] = set()
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = api.http.get("/v1/campaigns", params=params).json()
        unfinished |= {c["id"] for c in page["items"]
                       if c["id"] in ids and c["status"] not in TERMINAL}
        cursor = page["next_cursor"]
        if cursor is None:
            return unfinished


def in_progress(api: Api, ids: set[str]) -> int:
    found, cursor = 0, None
    while True:
        params: dict[str, Any] = {"status": "in_progress", "limit": 200,
                                  **({"cursor": cursor} if cursor else {})}
        page = api.http.get("/v1/campaigns", params=params).json()
        found += sum(c["id"] in ids for c in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def test_a_new_campaign_and_a_rollout_go_ahead_behind_many_capped_campaigns(
        fleet: Fleet, api: Api, emulator: EmulatorClient, operators: Operators,
        capped: list[str]) -> None:
    emulator.configure(latency_ms=5)
    _, capped_audience = fleet.import_own(api, reachable_devices(CAPPED_DEVICES))
    began = time.monotonic()
    capped += operators.each(CAPPED, lambda client, _: client.create_campaign(
        audience=capped_audience, rate_per_s=1))
    created_s = time.monotonic() - began
    wait_for(lambda: in_progress(api, set(capped)) == CAPPED, 60,
             f"all {CAPPED} capped campaigns to be in progress", interval_s=0.5)
    all_running_s = time.monotonic() - began
    # imported now: on nx-27017 every audience read scans all devices (see the module's doc)
    new_devices, new_audience = fleet.import_own(api, reachable_devices(NEW_DEVICES))
    rollout_devices, rollout_audience = fleet.import_own(api, reachable_devices(ROLLOUT_DEVICES))

    created_at = time.time()
    new = api.create_campaign(audience=new_audience)
    assert api.wait_finished(new, timeout_s=60)["status"] == "completed"
    rollout = api.create_campaign(audience=rollout_audience, rollout={
        "waves": [{"percent": 10, "hold_s": 0}, {"percent": 100}]})
    rollout_created = time.monotonic()
    finished = api.wait_finished(rollout, timeout_s=90)
    rollout_s = time.monotonic() - rollout_created
    still = in_progress(api, set(capped))

    received = emulator.received()
    new_tokens = {d["token"] for d in new_devices}
    first_s = min(r.received_at for r in received if r.token in new_tokens) - created_at
    rollout_tokens = {d["token"] for d in rollout_devices}
    rollout_sent = len({r.token for r in received if r.token in rollout_tokens and r.accepted})
    print(f"{CAPPED} capped campaigns created in {created_s:.1f} s, all in progress after "
          f"{all_running_s:.1f} s; a new uncapped campaign's first request {first_s:.3f} s after "
          f"its create call; a rollout [10% hold 0, 100%] to {ROLLOUT_DEVICES:,} created after "
          f"it completed in {rollout_s:.1f} s; {still} capped campaigns still in progress then")
    assert first_s <= FIRST_REQUEST_S * LOAD_MARGIN, first_s
    assert finished["status"] == "completed" and finished["rollout"]["wave"] == 2, finished
    assert finished["counts"]["sent"] == rollout_sent == ROLLOUT_DEVICES
    assert still == CAPPED, "the capped campaigns were not all running while the others went"
