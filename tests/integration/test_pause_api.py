"""Pause, resume, rollouts and the rate through the in-process api (real MongoDB wire server,
RabbitMQ and Redis behind it): the answers and their shapes, the refusals (4xx JSON that change
nothing), the operator log."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from herald.clock import utcnow
from herald.domain.rollout import Rollout, RolloutProgress, RolloutWave
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from tests.factories import insert
from tests.support import error_code

BAD_ROLLOUT = {"waves": [{"percent": 10}, {"percent": 5}, {"percent": 100}]}


async def test_a_malformed_rollout_is_a_422_that_says_why_and_creates_nothing(
        api: httpx.AsyncClient, stores: Stores) -> None:
    response = await api.post("/v1/campaigns", json={"title": "t", "body": "b",
                                                     "rollout": BAD_ROLLOUT})
    assert response.status_code == 422
    assert error_code(response) == "validation_error"
    assert "percents must increase strictly" in response.text
    assert await stores.campaigns.page(None, None, 10) == []


async def test_pause_then_resume_a_sending_campaign(api: httpx.AsyncClient,
                                                    stores: Stores) -> None:
    campaign_id = await insert(stores, status=Status.IN_PROGRESS)
    paused = await api.post(f"/v1/campaigns/{campaign_id}/pause", json={"reason": "complaints"})
    assert paused.status_code == 202, paused.text
    body: dict[str, Any] = paused.json()
    assert (body["status"], body["pause"]["kind"], body["pause"]["reason"]) == (
        "paused", "manual", "complaints")
    again = await api.post(f"/v1/campaigns/{campaign_id}/pause")
    assert (again.status_code, again.json()["pause"]["requested_at"]) == (
        200, body["pause"]["requested_at"])
    resumed = await api.post(f"/v1/campaigns/{campaign_id}/resume")
    assert resumed.status_code == 200
    assert resumed.json()["status"] == "in_progress"
    assert resumed.json()["pause"]["resumed_by"]["name"] == "bootstrap"
    log = (await api.get("/v1/operator-log", params={"campaign_id": campaign_id})).json()
    assert [e["action"] for e in reversed(log["items"])] == ["campaign.pause", "campaign.pause",
                                                            "campaign.resume"]


async def test_what_cannot_be_paused_or_resumed_is_a_409_and_unknown_a_404(
        api: httpx.AsyncClient, stores: Stores) -> None:
    scheduled = await insert(stores, due_in_s=3600)
    sending = await insert(stores, status=Status.IN_PROGRESS)
    refused = await api.post(f"/v1/campaigns/{scheduled}/pause")
    assert (refused.status_code, error_code(refused)) == (409, "not_pausable")
    refused = await api.post(f"/v1/campaigns/{sending}/resume")
    assert (refused.status_code, error_code(refused)) == (409, "not_paused")
    unknown = await api.post(f"/v1/campaigns/{'0' * 24}/pause")
    assert (unknown.status_code, error_code(unknown)) == (404, "campaign_not_found")
    stored = await stores.campaigns.get(scheduled)
    assert stored is not None and stored.status is Status.SCHEDULED


async def test_the_rate_alone_changes_while_a_campaign_sends(api: httpx.AsyncClient,
                                                             stores: Stores) -> None:
    sending = await insert(stores, status=Status.IN_PROGRESS)
    changed = await api.patch(f"/v1/campaigns/{sending}", json={"rate_per_s": 250})
    assert changed.status_code == 200, changed.text
    assert changed.json()["rate_per_s"] == 250
    stored = await stores.campaigns.get(sending)
    assert stored is not None and stored.rate_per_s == 250
    refused = await api.patch(f"/v1/campaigns/{sending}", json={"rate_per_s": 10, "title": "x"})
    assert (refused.status_code, error_code(refused)) == (409, "not_editable")
    bad = await api.patch(f"/v1/campaigns/{sending}", json={"rate_per_s": 0})
    assert bad.status_code == 422


async def test_resume_during_a_rollouts_hold_starts_the_next_wave_at_once(
        api: httpx.AsyncClient, stores: Stores) -> None:
    rollout = Rollout((RolloutWave(1, 300), RolloutWave(10, 300), RolloutWave(100)))
    holding = RolloutProgress(wave=0, hold_until=utcnow() + timedelta(minutes=5))
    campaign_id = await insert(stores, status=Status.IN_PROGRESS, rollout=rollout,
                               rollout_progress=holding)
    shown = (await api.get(f"/v1/campaigns/{campaign_id}")).json()["rollout"]
    assert (shown["wave"], shown["holding"], len(shown["waves"])) == (1, True, 3)
    resumed = await api.post(f"/v1/campaigns/{campaign_id}/resume")
    assert resumed.status_code == 200, resumed.text
    shown = (await api.get(f"/v1/campaigns/{campaign_id}")).json()["rollout"]
    assert (shown["wave"], shown["holding"]) == (2, False)
    again = await api.post(f"/v1/campaigns/{campaign_id}/resume")
    assert (again.status_code, error_code(again)) == (409, "not_paused"), "no hold to end"
