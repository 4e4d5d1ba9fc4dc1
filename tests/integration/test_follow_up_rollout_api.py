"""Issue 30, point 6, through the in-process api (real MongoDB wire server, RabbitMQ and Redis
behind it): retry, retarget, amend and correct of a campaign sent as a staged rollout keep its
waves and its gate, shown by each follow-up's GET; ``"rollout": null`` drops them, a rollout
replaces them, a malformed one is a 422 that creates nothing."""

from __future__ import annotations

from typing import Any

import httpx

from herald import names
from herald.adapters.mongo import Database
from herald.domain.documents import CampaignCounts, Dispatch
from herald.domain.rollout import HaltWhen, Rollout, RolloutProgress, RolloutWave
from herald.domain.status import Status
from herald.service_layer.ports import Stores
from tests.factories import insert
from tests.support import error_code

ORIGINAL = Rollout((RolloutWave(2, 300), RolloutWave(100)),
                   HaltWhen(failure_rate_above=0.05, min_attempts=200))
ORIGINAL_WAVES = [{"percent": 2.0, "hold_s": 300.0}, {"percent": 100.0, "hold_s": 0.0}]
OTHER = {"waves": [{"percent": 50, "hold_s": 10}, {"percent": 100}]}


async def _rolled_out(stores: Stores) -> str:
    return await insert(stores, status=Status.FAILED, rollout=ORIGINAL,
                        rollout_progress=RolloutProgress(wave=1),
                        counts=CampaignCounts(targeted=10, sent=5, failed=3),
                        dispatch=Dispatch(owner="d", next_seq=1, done=True))


async def _rollout_of(api: httpx.AsyncClient, response: httpx.Response,
                      half: str | None = None) -> dict[str, Any] | None:
    assert response.status_code == 202, response.text
    made = response.json() if half is None else response.json()[half]
    shown = await api.get(f"/v1/campaigns/{made['id']}")
    assert shown.status_code == 200
    rollout: dict[str, Any] | None = shown.json()["rollout"]
    return rollout


async def test_every_follow_up_keeps_the_rollout_and_its_gate(api: httpx.AsyncClient,
                                                              stores: Stores) -> None:
    original = await _rolled_out(stores)
    made = {
        "retry": await _rollout_of(api, await api.post(f"/v1/campaigns/{original}/retry")),
        "retarget": await _rollout_of(api, await api.post(f"/v1/campaigns/{original}/retarget",
                                                          json={"title": "Fixed"})),
        "amend": await _rollout_of(api, await api.post(f"/v1/campaigns/{original}/amend")),
        "correct: retarget": await _rollout_of(
            api, await api.post(f"/v1/campaigns/{original}/correct", json={"body": "Fixed"}),
            "retarget"),
    }
    for what, rollout in made.items():
        assert rollout is not None, what
        assert (rollout["waves"], rollout["wave"], rollout["holding"]) == (ORIGINAL_WAVES, 1,
                                                                         False), what
        gate = rollout["gate"]
        assert (gate["failure_rate_above"], gate["min_attempts"], gate["attempted"]) == (
            0.05, 200, 0), what


async def test_rollout_null_drops_it_a_rollout_replaces_it_a_bad_one_creates_nothing(
        api: httpx.AsyncClient, stores: Stores, db: Database) -> None:
    original = await _rolled_out(stores)
    dropped = await api.post(f"/v1/campaigns/{original}/retry", json={"rollout": None})
    assert await _rollout_of(api, dropped) is None
    replaced = await _rollout_of(api, await api.post(f"/v1/campaigns/{original}/amend",
                                                     json={"rollout": OTHER}))
    assert replaced is not None
    assert replaced["waves"] == [{"percent": 50.0, "hold_s": 10.0},
                                 {"percent": 100.0, "hold_s": 0.0}]
    assert replaced["gate"]["failure_rate_above"] is None
    before = await db[names.CAMPAIGNS].count_documents({})
    bad = await api.post(f"/v1/campaigns/{original}/retarget",
                         json={"rollout": {"waves": [{"percent": 50}]}})
    assert (bad.status_code, error_code(bad)) == (422, "validation_error")
    assert "the last wave must reach 100 percent" in bad.text
    assert await db[names.CAMPAIGNS].count_documents({}) == before
