"""The FCM emulator (fcm_emulator/) records the replacement fields of every request and refuses the
ones FCM would refuse; its client reads them back. The emulator runs in this process, on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from fcm_emulator.client import Received
from fcm_emulator.server import make_app
from herald.adapters.fcm import FcmError, parse_error
from herald.domain.payload import MessageTemplate, build_payload, web_push_topic

SEND = "/v1/projects/demo/messages:send"
KEY = "herald-6b0137d0eaff6ead39685496"


@pytest.fixture
async def fcm() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(make_app())) as client:
        yield client


async def send(fcm: TestClient[Any, Any], message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await fcm.post(SEND, data=orjson.dumps({"message": message}))
    return response.status, await response.json()


async def recorded(fcm: TestClient[Any, Any]) -> list[dict[str, Any]]:
    response = await fcm.get("/_emulator/requests")
    return [orjson.loads(line) for line in (await response.read()).splitlines()]


def keyed(token: str, *, collapse_id: Any = KEY, topic: Any = KEY,
          collapse_key: Any = KEY) -> dict[str, Any]:
    return {"token": token, "notification": {"title": "T", "body": "B"},
            "android": {"collapse_key": collapse_key, "notification": {"tag": KEY}},
            "apns": {"headers": {"apns-collapse-id": collapse_id}},
            "webpush": {"headers": {"Topic": topic}, "notification": {"tag": KEY}}}


# --- what is recorded ------------------------------------------------------------------------------
async def test_each_request_is_recorded_with_its_token_and_replacement_fields(
        fcm: TestClient[Any, Any]) -> None:
    template = MessageTemplate(build_payload("T", "B", {"k": "v"}, replace_key="promo:2026.11"))
    for token in ("one", "two"):
        response = await fcm.post(SEND, data=template.body_for(token))
        assert response.status == 200
    rows = await recorded(fcm)
    assert [row["token"] for row in rows] == ["one", "two"]
    for row in rows:
        assert row["error"] is None
        assert row["android_tag"] == row["android_collapse_key"] == "promo:2026.11"
        assert row["apns_collapse_id"] == row["webpush_tag"] == "promo:2026.11"
        assert row["webpush_topic"] == web_push_topic("promo:2026.11")


async def test_a_message_without_replacement_fields_is_recorded_with_none(
        fcm: TestClient[Any, Any]) -> None:
    status, _ = await send(fcm, {"token": "plain", "notification": {"title": "T", "body": "B"}})
    [row] = await recorded(fcm)
    assert status == 200 and isinstance(row.pop("received_at"), float)
    assert row == {"token": "plain", "error": None, "violation": None, "authorized_as": None,
                   "auth_error": None, "validate_only": False, "android_tag": None,
                   "android_collapse_key": None, "apns_collapse_id": None, "webpush_topic": None,
                   "webpush_tag": None}


async def test_a_partial_platform_block_records_what_it_has(fcm: TestClient[Any, Any]) -> None:
    await send(fcm, {"token": "t", "apns": {"headers": {"apns-collapse-id": "only-ios"}},
                     "android": {"priority": "high"}})
    row = (await recorded(fcm))[0]
    assert row["apns_collapse_id"] == "only-ios"
    assert row["android_tag"] is None and row["android_collapse_key"] is None
    assert row["webpush_topic"] is None


async def test_refused_requests_are_recorded_with_their_fields_and_error(
        fcm: TestClient[Any, Any]) -> None:
    await send(fcm, keyed("unregistered-1"))
    await send(fcm, keyed("ok", collapse_id="x" * 65))
    rows = await recorded(fcm)
    assert [(row["token"], row["error"]) for row in rows] == [
        ("unregistered-1", "UNREGISTERED"), ("ok", "INVALID_ARGUMENT")]
    assert rows[0]["android_tag"] == KEY
    assert rows[1]["apns_collapse_id"] == "x" * 65
    stats = await (await fcm.get("/_emulator/stats")).json()
    assert stats["requests"] == 2
    assert stats["by_error"] == {"UNREGISTERED": 1, "INVALID_ARGUMENT": 1}


async def test_reset_forgets_the_record(fcm: TestClient[Any, Any]) -> None:
    await send(fcm, keyed("one"))
    await fcm.post("/_emulator/reset")
    assert await recorded(fcm) == []


# --- what is refused, as FCM refuses it -------------------------------------------------------------
async def test_an_apns_collapse_id_of_64_bytes_is_accepted(fcm: TestClient[Any, Any]) -> None:
    status, body = await send(fcm, keyed("ok", collapse_id="x" * 64))
    assert status == 200 and body["name"].startswith("projects/demo/messages/")


@pytest.mark.parametrize("collapse_id", ["x" * 65, "한" * 22, "x" * 1000])
async def test_an_apns_collapse_id_over_64_bytes_is_an_invalid_argument(
        fcm: TestClient[Any, Any], collapse_id: str) -> None:
    response = await fcm.post(SEND, data=orjson.dumps({"message": keyed("ok",
                                                                        collapse_id=collapse_id)}))
    raw = await response.read()
    error = orjson.loads(raw)["error"]
    assert response.status == 400
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == "The length of [apns-collapse-id] header must not exceed [64] bytes."
    # A payload problem: a BadRequest naming the field, no FcmError (that one is about tokens).
    assert error["details"] == [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                                 "fieldViolations": [{"field": "message.apns.headers",
                                                      "description": error["message"]}]}]
    assert parse_error(response.status, raw) is FcmError.INVALID_PAYLOAD


@pytest.mark.parametrize("topic", ["", "x" * 33, "promo:2026", "a.b", "with space", "é"])
async def test_a_web_push_topic_outside_rfc_8030_is_an_invalid_argument(
        fcm: TestClient[Any, Any], topic: str) -> None:
    status, body = await send(fcm, keyed("ok", topic=topic))
    assert status == 400
    assert "RFC 8030" in body["error"]["message"]


@pytest.mark.parametrize("topic", ["a", "x" * 32, "A-z_09", KEY])
async def test_a_web_push_topic_within_rfc_8030_is_accepted(fcm: TestClient[Any, Any],
                                                           topic: str) -> None:
    status, _ = await send(fcm, keyed("ok", topic=topic))
    assert status == 200


@pytest.mark.parametrize(("field", "message"), [
    # Google's schema: collapse_key is a string, headers a map of strings (entry 0 of the map).
    ({"collapse_key": 7}, "Invalid value at 'message.android.collapse_key' (TYPE_STRING), 7"),
    ({"collapse_id": ["a"]},
     """Invalid value at 'message.apns.headers[0].value' (TYPE_STRING), ["a"]"""),
    ({"topic": {"a": 1}},
     """Invalid value at 'message.webpush.headers[0].value' (TYPE_STRING), {"a":1}"""),
])
async def test_a_replacement_field_that_is_not_a_string_is_an_invalid_argument(
        fcm: TestClient[Any, Any], field: dict[str, Any], message: str) -> None:
    status, body = await send(fcm, keyed("ok", **field))
    assert status == 400 and body["error"]["message"] == message


async def test_a_web_push_tag_that_is_not_a_string_is_an_invalid_argument(
        fcm: TestClient[Any, Any]) -> None:
    message = keyed("ok")
    message["webpush"]["notification"]["tag"] = 7  # the schema takes any JSON there; FCM does not
    status, body = await send(fcm, message)
    assert status == 400
    assert body["error"]["message"] == (
        "Invalid value at 'message.webpush.notification.tag' (TYPE_STRING)")


async def test_payload_problems_come_before_token_answers(fcm: TestClient[Any, Any]) -> None:
    """FCM reads the message before it looks the token up: a bad payload sent to a dead token
    is a payload problem, and says nothing about the token."""
    status, body = await send(fcm, keyed("unregistered-9", collapse_id="x" * 65))
    assert status == 400
    assert [detail["@type"] for detail in body["error"]["details"]] == [
        "type.googleapis.com/google.rpc.BadRequest"]


async def test_notification_plus_data_over_4096_bytes_is_still_refused(
        fcm: TestClient[Any, Any]) -> None:
    message = {"token": "ok", "notification": {"title": "T", "body": "b" * 4100}}
    status, body = await send(fcm, message)
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    fitting = {"token": "ok" * 3000, "notification": {"title": "T", "body": "b" * 4000}}
    assert (await send(fcm, fitting))[0] == 200  # a long token is not payload


# --- the client ------------------------------------------------------------------------------------
def test_received_reads_a_row_with_replacement_fields() -> None:
    row = {"received_at": 1.5, "token": "t", "error": None, "android_tag": "k",
           "android_collapse_key": "k", "apns_collapse_id": "k", "webpush_topic": "k",
           "webpush_tag": "k"}
    received = Received.from_row(row)
    assert received.accepted
    assert (received.android_tag, received.android_collapse_key, received.apns_collapse_id,
            received.webpush_topic, received.webpush_tag) == ("k",) * 5


def test_received_reads_a_row_of_an_older_emulator_and_ignores_fields_it_does_not_know() -> None:
    old = Received.from_row({"received_at": 1.0, "token": "t", "error": "UNREGISTERED"})
    newer = Received.from_row({"received_at": 1.0, "token": "t", "error": None, "future": 1})
    assert old == Received(received_at=1.0, token="t", error="UNREGISTERED")
    assert old.android_tag is None and old.webpush_topic is None and not old.accepted
    assert newer.token == "t" and newer.accepted


# --- reading the record as it grows ----------------------------------------------------------------
async def test_a_reader_of_the_record_gets_only_the_rows_after_those_it_has_until_a_reset(
        fcm: TestClient[Any, Any]) -> None:
    async def read(after: int, record: str) -> tuple[list[str], str, str]:
        response = await fcm.get("/_emulator/requests", params={"after": after, "record": record})
        tokens = [orjson.loads(line)["token"] for line in (await response.read()).splitlines()]
        return tokens, response.headers["X-Emulator-Record"], response.headers["X-Emulator-After"]

    await send(fcm, keyed("one"))
    tokens, record, after = await read(0, "")
    assert (tokens, after) == (["one"], "0")
    await send(fcm, keyed("two"))
    assert await read(1, record) == (["two"], record, "1")
    assert await read(2, record) == ([], record, "2")
    assert (await read(1, "another record"))[0] == ["one", "two"], "a stranger's offset is ignored"
    await fcm.post("/_emulator/reset")
    await send(fcm, keyed("three"))
    tokens, renewed, after = await read(2, record)
    assert (tokens, after) == (["three"], "0") and renewed != record
