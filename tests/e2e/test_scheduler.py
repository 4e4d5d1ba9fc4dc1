"""Issue 4's proof: three scheduler processes (in a process timezone that is not UTC) fire a due
campaign and a due schedule run exactly once, within a second; a scheduler that was down across
the due instant fires it late within the grace, or marks it missed beyond it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from bson import ObjectId
from pymongo import MongoClient

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from tests.e2e.harness import Api, devices
from tests.support import wait_for

PRECISION_S = 1.0
ODD_TZ = {"TZ": "Pacific/Chatham"}  # UTC+13:45 in November: nothing may depend on it


def start(stack: Stack, schedulers: int) -> None:
    stack.config.extra_env.update(ODD_TZ)
    stack.start_emulator()
    stack.start_service("api")
    stack.start_service("dispatcher")
    stack.start_service("sender")
    for index in range(1, schedulers + 1):
        stack.start_service("scheduler", f"scheduler-{index}")
    if schedulers:  # a scheduler still starting when a run falls due would fire it late
        stack.wait_for_pods({"scheduler": schedulers, "dispatcher": 1})


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def campaigns_of_schedule(stack: Stack, schedule_id: str) -> list[dict[str, object]]:
    with MongoClient(stack.config.mongodb_url, tz_aware=True) as client:
        return list(client[stack.config.database]["campaigns"].find({"schedule_id": schedule_id}))


def test_three_schedulers_fire_a_campaign_due_in_two_seconds_once_and_on_time(
        stack: Stack, api: Api) -> None:
    start(stack, schedulers=3)
    api.import_devices(devices(300))
    due = datetime.now(UTC) + timedelta(seconds=2)
    campaign_id = api.create_campaign(send_at=due.isoformat())
    assert api.campaign(campaign_id)["status"] == "scheduled"
    campaign = api.wait_finished(campaign_id, timeout_s=30)
    assert campaign["status"] == "completed"
    assert 0 <= (instant(campaign["fired_at"]) - due).total_seconds() <= PRECISION_S
    assert 0 <= (instant(campaign["started_at"]) - due).total_seconds() <= PRECISION_S
    listed = api.http.get("/v1/campaigns").json()["items"]
    assert [c["id"] for c in listed] == [campaign_id]


def test_three_schedulers_run_a_due_schedule_once_and_on_time(stack: Stack, api: Api) -> None:
    start(stack, schedulers=3)
    api.import_devices(devices(300))
    created = api.http.post("/v1/schedules", json={
        "name": "every minute", "cron": "* * * * *", "timezone": "America/New_York",
        "template": {"title": "Tick", "body": "Tock"}})
    schedule_id = created.json()["id"]
    # Cron has minute granularity; rather than wait up to a minute, plan this run 2 s ahead
    # in the store, as if the schedule had been created a while ago.
    due = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    with MongoClient(stack.config.mongodb_url, tz_aware=True) as client:
        client[stack.config.database]["schedules"].update_one(
            {"_id": ObjectId(schedule_id)}, {"$set": {"next_run_at": due}})
    runs = wait_for(lambda: campaigns_of_schedule(stack, schedule_id), 20, "the schedule's run")
    assert len(runs) == 1
    run = api.wait_finished(str(runs[0]["_id"]), timeout_s=30)
    assert 0 <= (instant(run["started_at"]) - due).total_seconds() <= PRECISION_S
    schedule = api.http.get(f"/v1/schedules/{schedule_id}").json()
    assert [r["outcome"] for r in schedule["runs"]] == ["fired"]
    assert instant(schedule["next_run_at"]) > due
    assert len(campaigns_of_schedule(stack, schedule_id)) == 1


def test_a_scheduler_down_across_the_due_instant_fires_late_within_the_grace(
        stack: Stack, api: Api) -> None:
    start(stack, schedulers=0)
    due = datetime.now(UTC) + timedelta(seconds=1)
    campaign_id = api.create_campaign(send_at=due.isoformat())
    wait_for(lambda: datetime.now(UTC) > due + timedelta(seconds=2), 10, "the due instant to pass")
    assert api.campaign(campaign_id)["status"] == "scheduled"
    stack.start_service("scheduler", "scheduler-late")
    campaign = api.wait_finished(campaign_id, timeout_s=30)
    assert campaign["status"] == "completed"
    assert instant(campaign["fired_at"]) - due >= timedelta(seconds=2)


def test_a_scheduler_down_beyond_the_grace_marks_the_campaign_missed(
        stack: Stack, api: Api) -> None:
    stack.config.extra_env["HERALD_MISFIRE_GRACE_S"] = "1"
    start(stack, schedulers=0)
    due = datetime.now(UTC) + timedelta(seconds=1)
    campaign_id = api.create_campaign(send_at=due.isoformat())
    wait_for(lambda: datetime.now(UTC) > due + timedelta(seconds=3), 10, "the grace to pass")
    stack.start_service("scheduler", "scheduler-late")
    campaign = api.wait_until(campaign_id, {"missed"}, timeout_s=15)
    assert "beyond the misfire grace of 1s" in campaign["error"]
    assert campaign["started_at"] is None
    assert campaign["counts"]["sent"] == 0


def test_local_time_delivery_sends_each_zone_when_its_clock_reaches_send_at(
        stack: Stack, api: Api, emulator: EmulatorClient) -> None:
    """send_at 09:00 means 09:00 on each device's own clock: here the wall-clock time is set
    3 s ahead in Seoul, so Seoul and Tokyo (and devices without a timezone: the campaign's is
    Seoul) get it then, and Madrid's turn, 8 hours later, is still waiting when it is cancelled."""
    start(stack, schedulers=1)
    zones = {"Asia/Seoul": range(0, 100), "Asia/Tokyo": range(100, 200),
             "Europe/Madrid": range(200, 300), None: range(300, 350)}
    population = [{"token": f"lt-{i:04d}", "platform": "ios", "timezone": zone}
                  for zone, indices in zones.items() for i in indices]
    api.import_devices(population)
    seoul_now = datetime.now(ZoneInfo("Asia/Seoul")).replace(tzinfo=None, microsecond=0)
    send_at = seoul_now + timedelta(seconds=3)
    campaign_id = api.create_campaign(send_at=send_at.isoformat(), timezone="Asia/Seoul",
                                      deliver_in_local_time=True)
    first_wave = {d["token"] for d in population if d["timezone"] != "Europe/Madrid"}
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] == len(first_wave), 30,
             "the first wave to be sent")
    received = emulator.received()
    due = send_at.replace(tzinfo=ZoneInfo("Asia/Seoul")).timestamp()
    assert {r.token for r in received} == first_wave
    assert min(r.received_at for r in received) >= due
    campaign = api.campaign(campaign_id)
    assert campaign["status"] == "in_progress"
    assert [w["zones"] for w in campaign["waves"]] == [["Asia/Seoul", "Asia/Tokyo"],
                                                       ["Europe/Madrid"]]
    api.http.post(f"/v1/campaigns/{campaign_id}/cancel").raise_for_status()
    cancelled = api.wait_until(campaign_id, {"cancelled"}, timeout_s=10)
    assert cancelled["counts"] == {"targeted": 350, "sent": 250, "failed": 0, "unsent": 100,
                                   "maybe_delivered": 0, "suppressed": 0}
    assert set(api.audit_tokens(campaign_id, "unsent")) == {
        d["token"] for d in population if d["timezone"] == "Europe/Madrid"}
