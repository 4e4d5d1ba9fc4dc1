"""Issue 32, point 2 end to end, on the shared fleet (api, dispatcher, two senders, the FCM
emulator): a marketing campaign's own cap of 1 a day, with the fleet's ``HERALD_MARKETING_CAP``
unset (what the shared stack runs with, so no other module's campaigns are capped): the second
campaign to the same people reaches none of them, every recipient recorded ``suppressed`` with
the rule, counted apart and listed in the audit; a retarget asking for them reaches them; a
transactional campaign is neither capped nor counted. Asserted from the emulator's own record.

Each person here is the test's own for this run (a random tag in their user id): the senders
keep what a person received in the fleet's Redis for the cap's window, across runs."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, pod_metric, reachable_devices

CAP = {"frequency_cap": "1/24h"}


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def population(devices: int, people: int) -> list[dict[str, Any]]:
    """``devices`` devices of ``people`` people of this run (the first people have two)."""
    run = uuid.uuid4().hex[:12]
    return [{**device, "user_id": f"{run}-person-{i % people}"}
            for i, device in enumerate(reachable_devices(devices))]


def received(emulator: EmulatorClient, tokens: set[str]) -> Counter[str]:
    return Counter(r.token for r in emulator.received() if r.token in tokens)


def counts(api: Api, campaign_id: str) -> dict[str, int]:
    done = api.wait_finished(campaign_id, timeout_s=60)
    assert done["status"] == "completed", done
    figures = done["counts"]
    assert sum(figures[k] for k in ("sent", "failed", "unsent", "suppressed")) == \
        figures["targeted"]
    return {k: figures[k] for k in ("targeted", "sent", "failed", "unsent", "suppressed")}


def test_a_second_marketing_campaign_to_the_same_people_is_suppressed_and_audited(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, population(1_500, people=1_000))
    tokens = {d["token"] for d in devices}
    suppressed_before = pod_metric(api, "sender", "herald_recipients_suppressed_total",
                                   rule="frequency_cap")

    first = api.create_campaign(audience=audience, **CAP)
    assert counts(api, first) == {"targeted": 1_500, "sent": 1_500, "failed": 0, "unsent": 0,
                                  "suppressed": 0}
    second = api.create_campaign(audience=audience, **CAP)
    assert counts(api, second) == {"targeted": 1_500, "sent": 0, "failed": 0, "unsent": 0,
                                   "suppressed": 1_500}
    assert received(emulator, tokens) == Counter(tokens)  # each device once, from the first
    audit = api.audit(second, "suppressed")
    assert sorted(line["token"] for line in audit) == sorted(tokens)
    assert {(line["rule"], line["error"]) for line in audit} == {("frequency_cap", None)}
    assert api.audit(second, "unsent") == []
    assert pod_metric(api, "sender", "herald_recipients_suppressed_total",
                      rule="frequency_cap") - suppressed_before == 1_500

    plain = api.http.post(f"/v1/campaigns/{second}/retarget", json={})
    asked = api.http.post(f"/v1/campaigns/{second}/retarget",
                          json={"include_suppressed": True, "frequency_cap": "none"})
    assert (plain.status_code, asked.status_code) == (202, 202), (plain.text, asked.text)
    assert counts(api, plain.json()["id"])["targeted"] == 0
    assert counts(api, asked.json()["id"]) == {"targeted": 1_500, "sent": 1_500, "failed": 0,
                                               "unsent": 0, "suppressed": 0}
    assert received(emulator, tokens) == Counter({token: 2 for token in tokens})


def test_a_transactional_campaign_is_neither_capped_nor_counted(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, audience = fleet.import_own(api, population(200, people=200))
    tokens = {d["token"] for d in devices}
    everyone = {"targeted": 200, "sent": 200, "failed": 0, "unsent": 0, "suppressed": 0}

    receipt = api.create_campaign(audience=audience, purpose="transactional")
    assert counts(api, receipt) == everyone
    offer = api.create_campaign(audience=audience, **CAP)  # the receipt did not count
    assert counts(api, offer) == everyone
    another = api.create_campaign(audience=audience, **CAP)
    assert counts(api, another)["suppressed"] == 200
    notice = api.create_campaign(audience=audience, purpose="transactional")
    assert counts(api, notice) == everyone  # nor is it capped
    assert received(emulator, tokens) == Counter({token: 3 for token in tokens})
