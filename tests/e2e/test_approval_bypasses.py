"""Issue 31, point 1, end to end on the shared fleet: each way one person got a large send onto
devices without a second person, tried again and refused. A second api replica and a scheduler
run with ``HERALD_APPROVAL_MIN_AUDIENCE`` (the setting is theirs; the module's tests share them
and its end stops both); the fleet's dispatcher and senders send what is approved, and the FCM
emulator's record says what reached devices.

People: ``ann`` creates, ``ben`` edits (and holds two keys), ``cat`` approves; the stack's admin
key is the person ``bootstrap``."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient

from devstack.processes import free_port
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.domain.rollout import wave_bucket
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

MIN_AUDIENCE = 10
QUIET_S = 1.5
"""How long nothing may reach FCM while something waits: six dispatcher sweeps (0.25 s each)."""


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture(scope="module")
def replicas(fleet: Fleet) -> Iterator[Api]:
    """The api replica with approvals on, as the stack's admin (``bootstrap``), and a scheduler
    with the same setting: started once for the module's tests (``Fleet.keep``)."""
    fleet.heal()
    stack = fleet.stack
    port = free_port()
    stack.start_service("api", "api-approval", HERALD_API_PORT=str(port),
                        HERALD_APPROVAL_MIN_AUDIENCE=str(MIN_AUDIENCE))
    stack.start_service("scheduler", "scheduler-approval",
                        HERALD_APPROVAL_MIN_AUDIENCE=str(MIN_AUDIENCE))
    for name in ("api-approval", "scheduler-approval"):
        fleet.keep(name)
    stack.wait_for_pods({"scheduler": 1})
    client = Api(f"http://127.0.0.1:{port}", stack.config.api_key)
    yield client
    client.http.close()
    for name in ("api-approval", "scheduler-approval"):
        fleet.release(name)


@pytest.fixture
def approving(stack: Stack, replicas: Api) -> Api:
    return replicas


@pytest.fixture
def scheduler(replicas: Api) -> None:
    """The module's scheduler runs for every test (see ``replicas``)."""


class People:
    """A client for each person's key (and ben's second key), minted for them."""

    def __init__(self, admin: Api) -> None:
        def key_of(name: str, owner: str) -> Api:
            return admin.as_key(admin.mint_key("operator", f"{name}-{uuid.uuid4().hex[:6]}",
                                               owner=owner))
        self.ann, self.ben, self.cat = (key_of(p, p) for p in ("ann", "ben", "cat"))
        self.ben_again = key_of("ben-phone", "ben")

    def close(self) -> None:
        for person in (self.ann, self.ben, self.cat, self.ben_again):
            person.http.close()


@pytest.fixture
def people(approving: Api) -> Iterator[People]:
    made = People(approving)
    yield made
    made.close()


_topics = itertools.count(1)


def own_devices(admin: Api, count: int) -> tuple[set[str], dict[str, Any]]:
    topic = f"approval-{uuid.uuid4().hex[:8]}-{next(_topics)}"
    devices = [{**d, "token": f"{d['token']}-{topic}", "topics": [topic]}
               for d in reachable_devices(count)]
    admin.import_devices(devices)
    return {d["token"] for d in devices}, {"topics": [topic]}


def reached(emulator: EmulatorClient, tokens: set[str]) -> list[str]:
    return [r.token for r in emulator.received() if r.token in tokens]


def approve(person: Api, campaign_id: str) -> Any:
    """Approve as an approver does: read it, send back the digest read."""
    digest = person.campaign(campaign_id)["content_digest"]
    return person.http.post(f"/v1/campaigns/{campaign_id}/approve", json={"digest": digest})


def code_of(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_an_editor_a_second_key_of_a_person_and_an_approval_without_digest_are_refused(
        approving: Api, people: People, emulator: EmulatorClient) -> None:
    tokens, audience = own_devices(approving, 12)
    campaign_id = people.ann.create_campaign(audience=audience)
    edited = people.ben.http.patch(f"/v1/campaigns/{campaign_id}", json={"title": "Ben's"})
    assert edited.json()["status"] == "awaiting_approval"
    for person in (people.ben, people.ben_again, people.ann):
        assert code_of(approve(person, campaign_id)) == (403, "self_approval")
    blind = people.cat.http.post(f"/v1/campaigns/{campaign_id}/approve")
    assert blind.status_code == 422
    own = approving.create_campaign(audience=audience)  # the admin, bootstrap
    self_minted = approving.as_key(approving.mint_key("operator", "admin's spare"))
    assert code_of(approve(self_minted, own)) == (403, "self_approval")
    self_minted.http.close()
    time.sleep(QUIET_S)
    assert reached(emulator, tokens) == [], "FCM received something nobody else approved"
    assert approve(people.cat, campaign_id).status_code == 200
    finished = approving.wait_finished(campaign_id, timeout_s=60)
    assert (finished["status"], finished["counts"]["sent"]) == ("completed", 12)
    approving.http.post(f"/v1/campaigns/{own}/cancel", json={"reason": "test over"})


def test_a_run_of_a_schedule_whose_template_was_replaced_waits_for_a_third_person(
        stack: Stack, approving: Api, scheduler: None, people: People) -> None:
    _, audience = own_devices(approving, 12)
    made = people.ann.http.post("/v1/schedules", json={
        "template": {"title": "Ann's", "body": "b", "audience": audience},
        "cron": "0 0 1 1 *", "timezone": "UTC"}).json()
    replaced = people.ben.http.patch(f"/v1/schedules/{made['id']}", json={
        "template": {"title": "Ben's", "body": "b", "audience": audience}})
    assert replaced.status_code == 200, replaced.text
    with MongoClient(stack.config.mongodb_url, tz_aware=True) as client:
        client[stack.config.database]["schedules"].update_one(
            {"_id": ObjectId(made["id"])}, {"$set": {"next_run_at": datetime.now(UTC)}})
    try:
        run_id = wait_for(lambda: approving.http.get(f"/v1/schedules/{made['id']}").json()[
            "runs"][:1], 30, "the schedule's run")[0]["campaign_id"]
        run = approving.campaign(run_id)
        assert (run["status"], run["title"]) == ("awaiting_approval", "Ben's")
        for person in (people.ben, people.ben_again, people.ann):
            assert code_of(approve(person, run_id)) == (403, "self_approval")
        assert approve(people.cat, run_id).json()["status"] == "pending"
        assert approving.wait_finished(run_id, timeout_s=60)["counts"]["sent"] == 12
    finally:
        approving.http.delete(f"/v1/schedules/{made['id']}")


ROLLOUT = {"waves": [{"percent": 50, "hold_s": 3600}, {"percent": 100}]}


def grown_then_approved(approving: Api, people: People, emulator: EmulatorClient
                        ) -> tuple[str, set[str]]:
    """A campaign ann made for a topic nobody had subscribed to (counted 0, no approval), in a
    rollout of two waves with an hour's hold; 9 devices of each wave subscribe before its time.
    At its time it is counted again and waits; cat approves it; wave 1 is sent and held. Its
    id and wave 1's tokens."""
    topic = f"grown-{uuid.uuid4().hex[:8]}"
    campaign_id = people.ann.create_campaign(
        audience={"topics": [topic]}, rollout=ROLLOUT, rate_per_s=50,
        send_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat())
    assert people.ann.campaign(campaign_id)["status"] == "scheduled"
    candidates = (f"{d['token']}-{topic}" for d in reachable_devices(200))
    first, second = [], []
    for token in candidates:
        wave = first if wave_bucket(campaign_id, token) < 50 else second
        if len(wave) < 9:
            wave.append(token)
    approving.import_devices([{"token": t, "platform": "android", "topics": [topic]}
                              for t in first + second])
    people.ann.http.patch(f"/v1/campaigns/{campaign_id}", json={
        "send_at": (datetime.now(UTC) + timedelta(seconds=1)).isoformat()})
    held = approving.wait_until(campaign_id, {"awaiting_approval"}, timeout_s=30)
    assert held["audience_estimate"] == 18
    time.sleep(QUIET_S)
    assert reached(emulator, set(first + second)) == []
    assert approve(people.cat, campaign_id).status_code == 200
    wait_for(lambda: approving.campaign(campaign_id)["rollout"]["holding"], 30,
             "wave 1 to be sent and held")
    assert sorted(reached(emulator, set(first + second))) == sorted(first)
    return campaign_id, set(first + second)


def test_an_audience_grown_before_its_time_waits_and_once_approved_its_creator_cannot_widen_it(
        approving: Api, scheduler: None, people: People, emulator: EmulatorClient) -> None:
    campaign_id, tokens = grown_then_approved(approving, people, emulator)
    path = f"/v1/campaigns/{campaign_id}"
    for wider in ({"rate_per_s": None}, {"rate_per_s": 500}):
        assert code_of(people.ann.http.patch(path, json=wider)) == (403, "approval_required")
    skip = people.ann.http.post(f"{path}/resume")
    assert code_of(skip) == (403, "approval_required")
    assert people.ann.http.patch(path, json={"rate_per_s": 20}).status_code == 200
    time.sleep(QUIET_S)
    assert len(reached(emulator, tokens)) == 9, "the hold was skipped"
    assert people.cat.http.post(f"{path}/resume").status_code in (200, 202)
    finished = approving.wait_finished(campaign_id, timeout_s=60)
    assert (finished["status"], finished["counts"]["sent"]) == ("completed", 18)


def test_a_correction_split_in_halves_waits_for_approval_as_a_whole(
        approving: Api, scheduler: None, people: People, emulator: EmulatorClient) -> None:
    campaign_id, tokens = grown_then_approved(approving, people, emulator)
    people.ann.http.post(f"/v1/campaigns/{campaign_id}/cancel", json={"reason": "broken link"})
    cancelled = approving.wait_finished(campaign_id, timeout_s=30)
    assert (cancelled["counts"]["sent"], cancelled["counts"]["unsent"]) == (9, 9)
    corrected = people.ann.http.post(f"/v1/campaigns/{campaign_id}/correct",
                                     json={"title": "Fixed"}).json()
    halves = [corrected["retarget"], corrected["amend"]]
    try:
        assert [half["status"] for half in halves] == ["awaiting_approval"] * 2
        time.sleep(QUIET_S)
        assert len(reached(emulator, tokens)) == 9, "a half of the correction went unapproved"
    finally:
        for half in halves:
            approving.http.post(f"/v1/campaigns/{half['id']}/cancel", json={"reason": "test"})
