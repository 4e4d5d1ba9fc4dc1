"""Issue 32, points 3 and 5 through the in-process api (nx-27017, Redis, a private vhost): a
campaign's own quiet hours (a window, or ``off``) need ``HERALD_QUIET_HOURS_ROLES`` and a
refused call changes nothing; the mode alone does not; a window that cannot be read, or quiet
hours on a transactional campaign, are a 422; the campaign and schedule show what was asked;
and the estimate says how many of an audience the quiet window holds (until when) or skips,
and how many the frequency cap would suppress now, from the cap's own history in Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from herald.adapters.frequency_caps import RedisFrequencyCaps
from herald.domain.access import Role
from herald.domain.frequency_cap import CapRule, CapWindow, send_key
from herald.names import RedisKeys
from herald.settings import Settings
from tests.integration.helpers import api_with, client_of, everything, mint
from tests.support import error_code

LATER = "2099-01-01T00:00:00Z"
SEOUL = ZoneInfo("Asia/Seoul")


@pytest.fixture
async def admins_only(broker_settings: Settings, admin_key: str, db: object,
                      redis: object) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An api where only admins give a campaign quiet hours of its own; its admin."""
    async with api_with(broker_settings, admin_key, quiet_hours_roles="admin") as running:
        yield running


async def test_a_key_without_the_quiet_hours_scope_is_refused_and_nothing_changes(
        admins_only: tuple[FastAPI, httpx.AsyncClient]) -> None:
    app, admin = admins_only
    assert (await admin.get("/v1/me")).json()["quiet_hours"] is True
    before = await everything(admin)
    async with client_of(app, await mint(admin, Role.OPERATOR)) as operator:
        assert (await operator.get("/v1/me")).json()["quiet_hours"] is False
        refused = [
            await operator.post("/v1/campaigns", json={
                "title": "Sale", "body": "Today", "quiet_hours": "off", "send_at": LATER}),
            await operator.post("/v1/campaigns", json={
                "title": "Sale", "body": "Today", "send_at": LATER,
                "quiet_hours": {"window": "23:00-06:00"}}),
            await operator.post("/v1/schedules", json={
                "cron": "0 9 * * MON", "timezone": "Europe/Paris",
                "template": {"title": "t", "body": "b", "quiet_hours": "off"}}),
        ]
        assert [(r.status_code, error_code(r)) for r in refused] == [
            (403, "quiet_hours_not_allowed")] * 3
        assert await everything(admin) == before
        skipping = await operator.post("/v1/campaigns", json={
            "title": "Sale", "body": "Today", "quiet_hours": "skip", "send_at": LATER})
        assert skipping.status_code == 202, skipping.text  # the setting's window: no scope


async def test_quiet_hours_are_read_shown_and_refused_where_they_cannot_apply(
        api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/campaigns", json={
        "title": "Sale", "body": "Today", "send_at": LATER, "timezone": None,
        "quiet_hours": {"window": " 22:00 - 07:30 ", "mode": "skip"}})
    assert made.status_code == 202, made.text
    view = (await api.get(f"/v1/campaigns/{made.json()['id']}")).json()
    assert view["quiet_hours"] == {"window": "22:00-07:30", "mode": "skip", "timezone": None}
    assert view["quiet_hours_until"] is None
    plain = await api.post("/v1/campaigns", json={"title": "S", "body": "b", "send_at": LATER})
    assert (await api.get(f"/v1/campaigns/{plain.json()['id']}")).json()["quiet_hours"] is None
    before = (await api.get("/v1/campaigns")).json()["items"]
    bad = [
        {"title": "S", "body": "b", "quiet_hours": {"window": "late"}},
        {"title": "S", "body": "b", "quiet_hours": {"window": "21:00-21:00"}},
        {"title": "S", "body": "b", "quiet_hours": "sometimes"},
        {"title": "S", "body": "b", "quiet_hours": {"mode": "later"}},
        {"title": "S", "body": "b", "quiet_hours": {"window": "21:00-08:00", "extra": 1}},
        {"title": "S", "body": "b", "quiet_hours": "skip", "purpose": "transactional"},
    ]
    answers = [await api.post("/v1/campaigns", json=body) for body in bad]
    assert [a.status_code for a in answers] == [422] * len(bad), [a.text for a in answers]
    assert all(a.json()["error"]["code"] for a in answers)
    assert "HH:MM-HH:MM" in answers[0].text and "transactional" in answers[-1].text
    assert (await api.get("/v1/campaigns")).json()["items"] == before
    estimate = await api.post("/v1/audiences/estimate", json={
        "purpose": "transactional", "quiet_hours": "skip"})
    assert estimate.status_code == 422


async def test_a_schedule_template_carries_its_quiet_hours(api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/schedules", json={
        "cron": "0 9 * * MON", "timezone": "Europe/Paris",
        "template": {"title": "t", "body": "b", "quiet_hours": {"window": "20:00-09:00"}}})
    assert made.status_code == 201, made.text
    assert made.json()["template"]["quiet_hours"] == {"window": "20:00-09:00", "mode": "hold"}


def window_around_now_in(zone: ZoneInfo, ahead: timedelta) -> str:
    """A quiet window from an hour ago to ``ahead`` from now, on ``zone``'s clock."""
    now = datetime.now(zone).replace(microsecond=0, tzinfo=None)
    return f"{now - timedelta(hours=1):%H:%M:%S}-{now + ahead:%H:%M:%S}"


async def test_the_estimate_says_what_quiet_hours_hold_or_skip_and_until_when(
        api: httpx.AsyncClient) -> None:
    topic = "quiet-estimate"
    devices = [{"token": f"quiet-est-{i}", "platform": "android", "marketing_enabled": True,
                "topics": [topic], "timezone": "Asia/Seoul" if i < 6 else "Europe/London"}
               for i in range(10)]
    devices += [{"token": "quiet-est-nozone", "platform": "ios", "marketing_enabled": True,
                 "topics": [topic]}]
    assert (await api.post("/v1/devices/bulk", json={"devices": devices})).status_code == 200
    window = window_around_now_in(SEOUL, timedelta(hours=2))
    asked = {"audience": {"topics": [topic]}, "timezone": "Asia/Seoul"}
    held = (await api.post("/v1/audiences/estimate", json={
        **asked, "quiet_hours": {"window": window}})).json()
    assert held["devices"] == 11
    assert held["held_back"] == {"marketing_opt_out": 0, "frequency_cap": 0,
                                 "quiet_hours_held": 7, "quiet_hours_skipped": 0}
    until = datetime.fromisoformat(held["quiet_hours_until"])
    assert abs((until - datetime.now(SEOUL)).total_seconds() - 7200) < 60
    assert held["finishes_in_s"] is None  # no sender alive here (the e2e test has some)
    skipped = (await api.post("/v1/audiences/estimate", json={
        **asked, "quiet_hours": {"window": window, "mode": "skip"}})).json()
    assert skipped["held_back"]["quiet_hours_skipped"] == 7
    assert skipped["held_back"]["quiet_hours_held"] == 0
    assert skipped["quiet_hours_until"] is None
    off = (await api.post("/v1/audiences/estimate", json={**asked, "quiet_hours": "off"}))
    assert off.json()["held_back"]["quiet_hours_held"] == 0


async def test_the_estimate_counts_those_the_cap_would_suppress_now_without_counting_them(
        api: httpx.AsyncClient, broker_settings: Settings, redis: Redis) -> None:
    """Three people of the audience already got a marketing push today (one has three
    devices): a cap of one a day holds back their five devices, and asking changes nothing."""
    topic = "cap-estimate"
    devices = [{"token": f"cap-est-{i}", "platform": "android", "marketing_enabled": True,
                "topics": [topic], "user_id": f"cap-est-person-{min(i, 5)}"} for i in range(8)]
    assert (await api.post("/v1/devices/bulk", json={"devices": devices})).status_code == 200
    caps = RedisFrequencyCaps(redis, RedisKeys(broker_settings.mongodb_database))
    earlier = "e" * 24
    day = CapRule((CapWindow(86_400, 1),), 86_400)
    assert await caps.admit(earlier, day, {f"u:cap-est-person-{p}": [send_key(earlier, 0, p)]
                                           for p in (0, 1, 5)}) == {
        "u:cap-est-person-0", "u:cap-est-person-1", "u:cap-est-person-5"}
    asked = {"audience": {"topics": [topic]}, "frequency_cap": "1/24h"}
    first = (await api.post("/v1/audiences/estimate", json=asked)).json()
    again = (await api.post("/v1/audiences/estimate", json=asked)).json()
    assert first["held_back"]["frequency_cap"] == 5  # person 5 has devices 5, 6 and 7
    assert again["held_back"] == first["held_back"]
    looser = (await api.post("/v1/audiences/estimate", json={
        **asked, "frequency_cap": "2/24h"})).json()
    assert looser["held_back"]["frequency_cap"] == 0
    uncapped = (await api.post("/v1/audiences/estimate", json={**asked,
                                                               "frequency_cap": "none"})).json()
    assert uncapped["held_back"]["frequency_cap"] == 0
