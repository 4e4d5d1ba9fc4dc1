"""The HTTP API in this process (real MongoDB wire server, RabbitMQ and Redis behind it): the
contract, and bad input answered with clear JSON errors that change nothing."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
import orjson
import pytest

from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.status import Status, Transition
from tests.factories import CAMPAIGN_BODY as CAMPAIGN
from tests.factories import campaign, paged_campaign
from tests.support import error_code, eventually


def device(token: str, **fields: Any) -> dict[str, Any]:
    return {"token": token, "platform": "android", "marketing_enabled": True, **fields}


async def campaigns_in(db: Database) -> int:
    return await db["campaigns"].count_documents({})



async def test_health_readiness_and_pods(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json()["status"] == "ok"
    ready = await api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"mongodb": "ok", "rabbitmq": "ok", "redis": "ok",
                                      "gauges": "ok"}
    pods = (await api.get("/v1/pods")).json()["pods"]
    assert [pod["service"] for pod in pods] == ["api"]
    metrics = await api.get("/metrics")
    assert "herald_cancel_unmatched_total" in metrics.text


async def test_devices_are_upserted_one_or_ten_thousand_at_a_time(api: httpx.AsyncClient) -> None:
    first = await api.post("/v1/devices", json=device("t-1", user_id="u1", timezone="Asia/Seoul"))
    again = await api.post("/v1/devices", json=device("t-1", platform="ios"))
    bulk = await api.post("/v1/devices/bulk",
                          json={"devices": [device(f"t-{i}") for i in range(10_000)]})
    assert (first.status_code, first.json()) == (201, {"token": "t-1", "created": True})
    assert (again.status_code, again.json()) == (200, {"token": "t-1", "created": False})
    assert bulk.json() == {"created": 9_999, "updated": 1}


@pytest.mark.parametrize("body", [
    device("t", unknown_field=1),
    device("t", platform="symbian"),
    device("t", attributes={"$where": "1"}),
    device("t", attributes={"age": {"$gt": 1}}),
    device("has space"),
    device("t", timezone="Mars/Olympus"),
    {"platform": "ios"},
])
async def test_bad_devices_are_refused_with_a_json_error(api: httpx.AsyncClient, db: Database,
                                                        body: dict[str, Any]) -> None:
    response = await api.post("/v1/devices", json=body)
    assert response.status_code == 422
    assert error_code(response) == "validation_error"
    assert await db["devices"].count_documents({}) == 0


async def test_a_bulk_over_ten_thousand_is_refused_whole(api: httpx.AsyncClient, db: Database) -> None:
    response = await api.post("/v1/devices/bulk",
                              json={"devices": [device(f"t-{i}") for i in range(10_001)]})
    assert response.status_code == 422
    assert await db["devices"].count_documents({}) == 0


async def test_a_campaign_is_created_read_and_listed(api: httpx.AsyncClient) -> None:
    created = await api.post("/v1/campaigns", json={**CAMPAIGN, "name": "first"})
    assert created.status_code == 202
    campaign_id = created.json()["id"]
    assert created.headers["location"] == f"/v1/campaigns/{campaign_id}"
    view = (await api.get(f"/v1/campaigns/{campaign_id}")).json()
    assert view["title"] == "Live now" and view["data"] == CAMPAIGN["data"]
    assert view["counts"] == {"targeted": 0, "sent": 0, "failed": 0, "unsent": 0,
                              "maybe_delivered": 0, "suppressed": 0}
    assert view["audience"]["push_enabled"] is True


async def test_listing_pages_with_a_cursor_and_filters_by_status(api: httpx.AsyncClient,
                                                                 db: Database) -> None:
    ids = [(await api.post("/v1/campaigns", json=CAMPAIGN)).json()["id"] for _ in range(5)]
    first = (await api.get("/v1/campaigns", params={"limit": 3})).json()
    second = (await api.get("/v1/campaigns",
                            params={"limit": 3, "cursor": first["next_cursor"]})).json()
    listed = [c["id"] for c in first["items"] + second["items"]]
    assert listed == list(reversed(ids))
    assert second["next_cursor"] is None
    await db["campaigns"].update_one({"_id": __import__("bson").ObjectId(ids[0])},
                                     {"$set": {"status": "completed"}})
    done = (await api.get("/v1/campaigns", params={"status": "completed"})).json()
    assert [c["id"] for c in done["items"]] == [ids[0]]


@pytest.mark.parametrize("path", ["/v1/campaigns", "/v1/schedules", "/v1/api-keys",
                                  "/v1/operator-log", "/v1/pods"])
async def test_an_unknown_query_parameter_is_a_422_naming_it(api: httpx.AsyncClient,
                                                              path: str) -> None:
    """A misspelt filter must not answer as if there were none (the whole list)."""
    answer = await api.get(path, params={"stauts": "failed"})
    assert answer.status_code == 422, answer.text
    assert error_code(answer) == "unknown_query_parameter"
    assert answer.json()["error"]["details"] == [{"loc": ["query", "stauts"]}]
    assert (await api.get(path)).status_code == 200


async def test_a_retried_create_with_the_same_idempotency_key_returns_the_first_campaign(
        api: httpx.AsyncClient, db: Database) -> None:
    headers = {"Idempotency-Key": "order-42"}
    first = await api.post("/v1/campaigns", json=CAMPAIGN, headers=headers)
    retry = await api.post("/v1/campaigns", json=CAMPAIGN, headers=headers)
    other = await api.post("/v1/campaigns", json={**CAMPAIGN, "title": "Else"}, headers=headers)
    assert retry.status_code == 202 and retry.json()["id"] == first.json()["id"]
    assert retry.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422 and error_code(other) == "idempotency_key_reused"
    assert await campaigns_in(db) == 1


@pytest.mark.parametrize(("changes", "code"), [
    ({"data": {"count": 3}}, "validation_error"),
    ({"data": {"bible_code": "3"}}, "validation_error"),
    ({"data": {"landingUrl": "x" * 4100}}, "payload_too_large"),
    ({"surprise": True}, "validation_error"),
    ({"audience": {"attributes": {"age": {"$gt": 3}}}}, "validation_error"),
    ({"audience": {"attributes": {"$where": {"eq": 1}}}}, "validation_error"),
    ({"audience": {"user_ids": {"$ne": None}}}, "validation_error"),
    ({"chunk_size": 0}, "validation_error"),
    ({"send_at": "2020-01-01T00:00:00Z"}, "send_at_in_past"),
    ({"send_at": "2099-01-01T09:00:00"}, "ambiguous_time"),
])
async def test_bad_campaigns_are_refused_before_anything_is_queued(
        api: httpx.AsyncClient, db: Database, changes: dict[str, Any], code: str) -> None:
    response = await api.post("/v1/campaigns", json={**CAMPAIGN, **changes})
    assert response.status_code == 422
    assert error_code(response) == code
    assert await campaigns_in(db) == 0


async def test_a_snake_case_data_key_error_names_the_camel_case_one(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/campaigns", json={**CAMPAIGN, "data": {"landing_url": "x"}})
    assert "landingUrl" in response.json()["error"]["message"]


async def test_malformed_ids_unknown_campaigns_and_routes_answer_in_json(
        api: httpx.AsyncClient) -> None:
    malformed = await api.get("/v1/campaigns/not-an-id")
    unknown = await api.get(f"/v1/campaigns/{'0' * 24}")
    no_route = await api.get("/v2/nothing")
    broken_json = await api.post("/v1/campaigns", content=b"{",
                                 headers={"content-type": "application/json"})
    assert (malformed.status_code, error_code(malformed)) == (422, "validation_error")
    assert (unknown.status_code, error_code(unknown)) == (404, "campaign_not_found")
    assert (no_route.status_code, error_code(no_route)) == (404, "not_found")
    assert (broken_json.status_code, error_code(broken_json)) == (422, "validation_error")


async def test_the_audit_streams_ndjson_per_outcome(api: httpx.AsyncClient, db: Database,
                                                   stores: Any) -> None:
    campaign_id = await paged_campaign(stores)
    sent = await api.get(f"/v1/campaigns/{campaign_id}/recipients", params={"outcome": "sent"})
    failed = await api.get(f"/v1/campaigns/{campaign_id}/recipients", params={"outcome": "failed"})
    bad = await api.get(f"/v1/campaigns/{campaign_id}/recipients", params={"outcome": "lost"})
    assert sent.headers["content-type"] == "application/x-ndjson"
    lines = [orjson.loads(line) for line in sent.content.splitlines()]
    assert len(lines) == 12 and set(lines[0]) == {"token", "user_id", "outcome", "error", "variant",
                                                  "rule"}
    assert [orjson.loads(line) for line in failed.content.splitlines()] == [
        {"token": "tok-00011", "user_id": "u11", "outcome": "failed", "error": "UNREGISTERED",
         "variant": "default", "rule": None}]
    assert bad.status_code == 422


async def test_the_audit_downloads_as_csv_with_a_header_row_and_a_filename(
        api: httpx.AsyncClient, stores: Any) -> None:
    campaign_id = await paged_campaign(stores)
    url = f"/v1/campaigns/{campaign_id}/recipients"
    ndjson = await api.get(url, params={"outcome": "unsent"})
    by_param = await api.get(url, params={"outcome": "unsent", "format": "csv"})
    by_accept = await api.get(url, params={"outcome": "unsent"}, headers={"Accept": "text/csv"})
    bad = await api.get(url, params={"outcome": "unsent", "format": "xlsx"})
    expected = [orjson.loads(line) for line in ndjson.content.splitlines()]
    rows = list(csv.DictReader(io.StringIO(by_param.text)))
    assert by_param.headers["content-type"].startswith("text/csv")
    assert by_param.headers["content-disposition"] == (
        f'attachment; filename="campaign-{campaign_id}-unsent.csv"')
    assert by_param.text.splitlines()[0] == "token,user_id,outcome,error,variant,rule"
    assert len(rows) == len(expected) == 17
    assert rows == [{k: v or "" for k, v in line.items()} for line in expected]
    assert by_accept.content == by_param.content
    assert ndjson.headers["content-disposition"].endswith('-unsent.ndjson"')
    assert (bad.status_code, error_code(bad)) == (422, "validation_error")


async def test_cancel_answers_by_status(api: httpx.AsyncClient, stores: Any) -> None:
    pending = (await api.post("/v1/campaigns", json={**CAMPAIGN, "audience": {"user_ids": ["x"]}}))
    document = campaign(status=Status.COMPLETED)
    await stores.campaigns.insert(document)
    first = await api.post(f"/v1/campaigns/{pending.json()['id']}/cancel",
                           json={"reason": "wrong link"}, headers={"X-Requested-By": "lead"})
    repeated = await api.post(f"/v1/campaigns/{pending.json()['id']}/cancel")
    finished = await api.post(f"/v1/campaigns/{document.id}/cancel")
    unknown = await api.post(f"/v1/campaigns/{'0' * 24}/cancel")
    assert first.status_code == 200
    body = first.json()
    assert body["status"] == "cancelled" and body["cancel"]["reason"] == "wrong link"
    assert body["cancel"]["acknowledged_at"]
    # the actor is the key that called (issue 10); the header is kept as information only
    me = (await api.get("/v1/me")).json()
    assert me["id"].startswith("bootstrap")  # each bootstrap secret is a key of its own
    assert body["cancel"]["requested_by"] == {"id": me["id"], "name": "bootstrap",
                                              "kind": "api_key", "verified": True,
                                              "owner": "bootstrap"}
    assert body["cancel"]["on_behalf_of"] == "lead"
    assert (repeated.status_code, repeated.json()["status"]) == (200, "cancelled")
    assert (finished.status_code, error_code(finished)) == (409, "not_cancellable")
    assert (unknown.status_code, error_code(unknown)) == (404, "campaign_not_found")


async def test_an_in_progress_campaign_with_no_live_sender_is_cancelled_right_after_the_202(
        api: httpx.AsyncClient, stores: Any) -> None:
    document = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(document)
    response = await api.post(f"/v1/campaigns/{document.id}/cancel")
    assert (response.status_code, response.json()["status"]) == (202, "cancelling")

    async def cancelled() -> dict[str, Any] | None:
        view: dict[str, Any] = (await api.get(f"/v1/campaigns/{document.id}")).json()
        return view if view["status"] == "cancelled" else None

    view = await eventually(cancelled, timeout_s=5, what="the cancel to be confirmed")
    assert view["cancel"]["acknowledged_at"] is not None


async def test_retarget_follows_up_a_finished_campaign_only(api: httpx.AsyncClient,
                                                             stores: Any) -> None:
    running = campaign(status=Status.IN_PROGRESS)
    await stores.campaigns.insert(running)
    finished_id = await paged_campaign(stores)
    await stores.campaigns.transition(finished_id, Transition.FAIL, utcnow())
    refused = await api.post(f"/v1/campaigns/{running.id}/retarget")
    follow_up = await api.post(f"/v1/campaigns/{finished_id}/retarget",
                               json={"title": "Fixed link", "data": {"landingUrl": "https://ok"}})
    assert (refused.status_code, error_code(refused)) == (409, "not_retargetable")
    assert follow_up.status_code == 202
    view = (await api.get(f"/v1/campaigns/{follow_up.json()['id']}")).json()
    assert view["retarget"] == {"campaign_id": finished_id, "outcome": "unsent"}
    assert view["title"] == "Fixed link" and view["body"] == "b"
    assert view["data"] == {"landingUrl": "https://ok"}
