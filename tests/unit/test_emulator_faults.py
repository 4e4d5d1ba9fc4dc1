"""The FCM emulator answers every fault in Google's shapes (``google.rpc.Status``; an FcmError detail
only where FCM sends one) and keeps a record of what it received and why it refused it. The
emulator runs in this process, on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from fcm_emulator.client import GrantRow, Received
from fcm_emulator.server import make_app
from herald.domain.payload import MessageTemplate, build_payload

SEND = "/v1/projects/demo/messages:send"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
TEMPLATE = MessageTemplate(build_payload("T", "B", {"landingUrl": "https://x.test"},
                                         replace_key="promo"))

Client = TestClient[Any, Any]


@pytest.fixture
async def fcm() -> AsyncIterator[Client]:
    async with TestClient(TestServer(make_app())) as client:
        yield client


async def send(fcm: Client, token: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    response = await fcm.post(SEND, data=body if body is not None else TEMPLATE.body_for(token))
    return response.status, await response.json()


async def configure(fcm: Client, **config: Any) -> dict[str, Any]:
    response = await fcm.post("/_emulator/config", data=orjson.dumps(config))
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def rows(fcm: Client) -> list[Received]:
    response = await fcm.get("/_emulator/requests")
    return [Received.from_row(orjson.loads(line)) for line in (await response.read()).splitlines()]


async def stats(fcm: Client) -> dict[str, Any]:
    return dict(await (await fcm.get("/_emulator/stats")).json())


def detail_types(body: dict[str, Any]) -> list[str]:
    return [detail["@type"] for detail in body["error"].get("details", [])]


def error_code(body: dict[str, Any]) -> str | None:
    codes = [d["errorCode"] for d in body["error"].get("details", []) if d["@type"] == FCM_ERROR]
    return codes[0] if codes else None


# --- token faults ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("token", "http", "status", "code", "message"), [
    ("unregistered-1", 404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."),
    ("invalid-1", 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
     "The registration token is not a valid FCM registration token"),
    ("mismatch-1", 403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"),
    ("apnsauth-1", 401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR",
     "Auth error from APNS or Web Push Service"),
    ("quota-1", 429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", None),
    ("unavailable-1", 503, "UNAVAILABLE", "UNAVAILABLE", None),
    ("internal-1", 500, "INTERNAL", "INTERNAL", None),
])
async def test_each_token_prefix_answers_in_google_s_shape(
        fcm: Client, token: str, http: int, status: str, code: str, message: str | None) -> None:
    got, body = await send(fcm, token)
    assert got == http
    assert body["error"]["code"] == http and body["error"]["status"] == status
    assert error_code(body) == code
    assert message is None or body["error"]["message"] == message
    [row] = await rows(fcm)
    assert row.token == token and row.error == code and row.violation is None


async def test_a_third_party_auth_error_names_the_apns_error(fcm: Client) -> None:
    _, body = await send(fcm, "apnsauth-1")
    apns = [d for d in body["error"]["details"]
            if d["@type"] == "type.googleapis.com/google.firebase.fcm.v1.ApnsError"]
    assert apns == [{"@type": "type.googleapis.com/google.firebase.fcm.v1.ApnsError",
                     "statusCode": 403, "reason": "InvalidProviderToken"}]


async def test_quota_comes_with_retry_after(fcm: Client) -> None:
    response = await fcm.post(SEND, data=TEMPLATE.body_for("quota-1"))
    assert response.status == 429 and response.headers["Retry-After"] == "1"


async def test_a_device_over_its_rate_is_refused_once_in_google_s_shape(fcm: Client) -> None:
    """FCM's errorCode is QUOTA_EXCEEDED for the project's rate and a device's alike; the
    ``QuotaFailure`` names which (Google's ErrorCode reference)."""
    response = await fcm.post(SEND, data=TEMPLATE.body_for("devicequota-1"))
    body = await response.json()
    assert response.status == 429 and response.headers["Retry-After"] == "1"
    assert error_code(body) == "QUOTA_EXCEEDED"
    [quota] = [d for d in body["error"]["details"]
               if d["@type"] == "type.googleapis.com/google.rpc.QuotaFailure"]
    assert "device" in quota["violations"][0]["description"]
    assert (await send(fcm, "devicequota-1"))[0] == 200
    assert [row.error for row in await rows(fcm)] == ["QUOTA_EXCEEDED", None]
    _, project = await send(fcm, "quota-1")
    [quota] = [d for d in project["error"]["details"]
               if d["@type"] == "type.googleapis.com/google.rpc.QuotaFailure"]
    assert "device" not in str(quota)


async def test_a_flaky_token_fails_once_then_is_accepted(fcm: Client) -> None:
    assert (await send(fcm, "flaky-1"))[0] == 503
    assert (await send(fcm, "flaky-1"))[0] == 200
    assert [row.error for row in await rows(fcm)] == ["UNAVAILABLE", None]


async def test_a_stalled_answer_is_delivered_at_arrival_and_answered_late(fcm: Client) -> None:
    await configure(fcm, stall_ms=400)
    started = time.monotonic()
    pending = asyncio.ensure_future(send(fcm, "stall-1"))
    deadline = time.monotonic() + 5
    while not await rows(fcm):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    [row] = await rows(fcm)
    assert row.accepted and not pending.done()  # delivered, not yet answered
    status, body = await pending
    assert status == 200 and body["name"].startswith("projects/demo/messages/")
    assert time.monotonic() - started >= 0.4


# --- payload problems: BadRequest, no FcmError -----------------------------------------------------
async def test_a_payload_problem_carries_a_bad_request_and_no_fcm_error(fcm: Client) -> None:
    body = orjson.dumps({"message": {"token": "ok", "android": {"ttl": "4 weeks"}}})
    status, answer = await send(fcm, "", body)
    assert status == 400 and answer["error"]["status"] == "INVALID_ARGUMENT"
    assert detail_types(answer) == [BAD_REQUEST]
    [violation] = answer["error"]["details"][0]["fieldViolations"]
    assert violation["field"] == "message.android.ttl"
    assert violation["description"] == answer["error"]["message"]
    [row] = await rows(fcm)
    assert row.error == "INVALID_ARGUMENT" and row.violation == answer["error"]["message"]


async def test_payload_fcm_error_adds_fcm_error_to_fcm_rule_violations_only(fcm: Client) -> None:
    assert (await configure(fcm, payload_fcm_error=True))["payload_fcm_error"] is True
    rule = orjson.dumps({"message": {"token": "ok", "topic": "news"}})
    schema = orjson.dumps({"message": {"token": "ok", "data": {"a": 1}}})
    assert detail_types((await send(fcm, "", rule))[1]) == [BAD_REQUEST, FCM_ERROR]
    assert detail_types((await send(fcm, "", schema))[1]) == [BAD_REQUEST]


async def test_a_body_that_is_not_json_is_refused_and_recorded(fcm: Client) -> None:
    status, answer = await send(fcm, "", b'{"message": {"token": ')
    assert status == 400 and answer["error"]["message"].startswith("Invalid JSON payload received.")
    assert "field" not in answer["error"]["details"][0]["fieldViolations"][0]
    [row] = await rows(fcm)
    assert row.token == "" and row.violation is not None


async def test_identical_bodies_are_judged_alike_whatever_the_token(fcm: Client) -> None:
    bad = MessageTemplate({"notification": {"title": "T"}, "data": {"from": "x"}})
    for token in ("a", "b", "unregistered-c"):
        status, answer = await send(fcm, token, bad.body_for(token))
        assert status == 400 and answer["error"]["details"][0]["fieldViolations"][0]["field"] == (
            "message.data[0].key")
    for token in ("a", "unregistered-b"):
        await send(fcm, token)
    assert [(row.token, row.error) for row in (await rows(fcm))[3:]] == [
        ("a", None), ("unregistered-b", "UNREGISTERED")]


async def test_a_second_token_key_later_in_the_body_is_the_one_read(fcm: Client) -> None:
    body = b'{"message":{"token":"first","notification":{"title":"T"},"token":"unregistered-2"}}'
    for _ in range(2):  # the second time from the cache, if there were one for such a body
        assert (await send(fcm, "", body))[0] == 404
    assert [row.token for row in await rows(fcm)] == ["unregistered-2"] * 2


async def test_a_dry_run_is_checked_and_not_delivered(fcm: Client) -> None:
    body = orjson.dumps({"message": {"token": "ok", "notification": {"title": "T"}},
                         "validate_only": True})
    status, answer = await send(fcm, "", body)
    assert status == 200 and answer == {"name": "projects/demo/messages/fake_message_id"}
    [row] = await rows(fcm)
    assert row.validate_only and row.accepted


# --- whole-emulator faults -------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "http", "status", "code", "details"), [
    ("INVALID_PAYLOAD", 400, "INVALID_ARGUMENT", None, [BAD_REQUEST]),
    ("PERMISSION_DENIED", 403, "PERMISSION_DENIED", None,
     ["type.googleapis.com/google.rpc.ErrorInfo"]),
    ("UNAUTHENTICATED", 401, "UNAUTHENTICATED", None, []),
    ("THIRD_PARTY_AUTH_ERROR", 401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR",
     ["type.googleapis.com/google.firebase.fcm.v1.ApnsError", FCM_ERROR]),
    ("SENDER_ID_MISMATCH", 403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", [FCM_ERROR]),
    ("NOT_FOUND", 404, "NOT_FOUND", None, []),
])
async def test_fail_all_answers_every_send_in_google_s_shape(
        fcm: Client, fault: str, http: int, status: str, code: str | None,
        details: list[str]) -> None:
    answer = await configure(fcm, fail_all={"error": fault})
    assert answer["fail_all"] == {"error": fault, "until": None}
    for token in ("ok-1", "ok-2"):
        got, body = await send(fcm, token)
        assert got == http and body["error"]["status"] == status
        assert error_code(body) == code and detail_types(body) == details
    received = await rows(fcm)
    assert [row.accepted for row in received] == [False, False]  # recorded, not delivered


async def test_permission_denied_names_the_project_and_the_permission(fcm: Client) -> None:
    await configure(fcm, fail_all={"error": "PERMISSION_DENIED"})
    _, body = await send(fcm, "ok")
    assert body["error"]["message"] == (
        "Permission 'cloudmessaging.messages.create' denied on resource "
        "'//cloudresourcemanager.googleapis.com/projects/demo' (or it may not exist).")
    assert body["error"]["details"][0]["reason"] == "IAM_PERMISSION_DENIED"


async def test_fail_all_ends_after_for_s_or_when_set_to_null(fcm: Client) -> None:
    await configure(fcm, fail_all={"error": "NOT_FOUND", "for_s": 0.2})
    assert (await send(fcm, "ok"))[0] == 404
    await asyncio.sleep(0.25)
    assert (await send(fcm, "ok"))[0] == 200
    await configure(fcm, fail_all={"error": "NOT_FOUND"})
    assert (await configure(fcm, fail_all=None))["fail_all"] is None
    assert (await send(fcm, "ok"))[0] == 200


async def test_the_body_s_own_violation_is_recorded_whatever_the_answer(fcm: Client) -> None:
    await configure(fcm, fail_all={"error": "PERMISSION_DENIED"})
    await send(fcm, "", orjson.dumps({"message": {"token": "ok", "foo": 1}}))
    await send(fcm, "ok")
    assert [row.violation is not None for row in await rows(fcm)] == [True, False]
    assert (await stats(fcm))["violations"] == 1


async def test_push_back_still_answers_every_send(fcm: Client) -> None:
    await configure(fcm, push_back={"error": "QUOTA_EXCEEDED", "for_s": 5, "retry_after_s": 2})
    response = await fcm.post(SEND, data=TEMPLATE.body_for("ok"))
    assert response.status == 429 and response.headers["Retry-After"] == "2"


@pytest.mark.parametrize("config", [{"fail_all": {"error": "UNREGISTERED"}},
                                    {"push_back": {"error": "PERMISSION_DENIED", "for_s": 1}},
                                    {"token_endpoint": {"refuse": "access_denied"}},
                                    {"latency_ms": "slow"}])
async def test_a_configuration_the_emulator_cannot_honour_is_refused(
        fcm: Client, config: dict[str, Any]) -> None:
    response = await fcm.post("/_emulator/config", data=orjson.dumps(config))
    assert response.status == 400


async def test_the_configuration_is_answered_whole(fcm: Client) -> None:
    answer = await configure(fcm, stall_ms=50, token_endpoint={"stall_s": 0.5})
    assert answer["stall_ms"] == 50
    assert answer["token_endpoint"] == {"refuse": None, "stall_s": 0.5, "expires_in_s": 3600}
    assert {"latency_ms", "push_back_error", "fail_all", "revoked_tokens"} <= answer.keys()


async def test_reset_forgets_the_record_and_the_behaviour(fcm: Client) -> None:
    await configure(fcm, fail_all={"error": "NOT_FOUND"}, stall_ms=1)
    await send(fcm, "flaky-1")
    await fcm.post("/_emulator/reset")
    assert await rows(fcm) == []
    assert (await stats(fcm))["stall_ms"] == 15000
    assert (await send(fcm, "flaky-1"))[0] == 503  # flaky tokens are forgotten too


async def test_stats_count_violations_and_name_the_document_s_revision(fcm: Client) -> None:
    await send(fcm, "", orjson.dumps({"message": {"topic": "a", "token": "b"}}))
    await send(fcm, "unregistered-1")
    counted = await stats(fcm)
    assert counted["requests"] == 2 and counted["violations"] == 1
    assert counted["by_error"] == {"INVALID_ARGUMENT": 1, "UNREGISTERED": 1}
    assert len(counted["discovery_revision"]) == 8 and counted["unauthenticated"] == {}


async def test_bodies_are_kept_only_when_asked() -> None:
    async with TestClient(TestServer(make_app(keep_bodies=True))) as kept:
        await send(kept, "one")
        [row] = await rows(kept)
        assert row.body == orjson.loads(TEMPLATE.body_for("one"))
    async with TestClient(TestServer(make_app())) as plain:
        await send(plain, "one")
        response = await plain.get("/_emulator/requests")
        assert "body" not in orjson.loads(await response.read())


async def test_the_record_read_again_has_the_earlier_rows_and_the_new_ones() -> None:
    """Rows are encoded once, on the first read after they arrive (tests poll 50,000-row records)."""
    async with TestClient(TestServer(make_app(keep_bodies=True))) as fcm:
        await send(fcm, "one")
        assert [row.token for row in await rows(fcm)] == ["one"]
        await send(fcm, "unregistered-2")
        await send(fcm, "three")
        received = await rows(fcm)
        assert [(row.token, row.error) for row in received] == [
            ("one", None), ("unregistered-2", "UNREGISTERED"), ("three", None)]
        assert received[2].body["message"]["token"] == "three"
        await fcm.post("/_emulator/reset")
        await send(fcm, "four")
        assert [row.token for row in await rows(fcm)] == ["four"]


def test_the_client_reads_the_new_fields_and_ignores_unknown_ones() -> None:
    row = Received.from_row({"received_at": 1.0, "token": "t", "error": "UNAUTHENTICATED",
                             "violation": None, "authorized_as": None, "auth_error": "expired",
                             "validate_only": False, "from_a_later_emulator": 1})
    assert row.auth_error == "expired" and not row.accepted and row.body is None
    grant = GrantRow.from_row({"at": 1.0, "client_email": "a@b", "granted": True, "error": None,
                               "expires_at": 2.0, "scope": "later"})
    assert grant == GrantRow(1.0, "a@b", True, None, 2.0)
