"""Platform options (TTL, priority, Android channel, sound, badge, what a tap opens, analytics
label): where each lands in the FCM message, checked against Google's discovery document (the
emulator's validator, loaded from google-api-python-client) and against firebase-admin's own
encoding of the same options; refused by the API where FCM would refuse them; counted in the
4 KB rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from firebase_admin import _messaging_encoder, messaging
from pydantic import ValidationError

from fcm_emulator.discovery import Validator
from herald.contracts.http import CampaignCreate, Content, RetargetRequest
from herald.domain.payload import (
    MAX_PAYLOAD_BYTES,
    ClickActions,
    MessageTemplate,
    SendOptions,
    build_payload,
)

EVERY_OPTION = SendOptions(
    ttl_s=3600, priority="high", android_channel_id="live_events", sound="default", badge=3,
    click=ClickActions(android="OPEN_LIVE", ios="LIVE_CATEGORY", web="https://example.com/live"),
    analytics_label="live-2026-11")
NOW_S = 1_795_500_000.0


@pytest.fixture(scope="module")
def google() -> Validator:
    return Validator()


def message(options: SendOptions | None, now_s: float = NOW_S) -> dict[str, Any]:
    body = MessageTemplate(build_payload("Live now", "Tap to watch", {"landingUrl": "https://x"},
                                         replace_key="herald-6b0137d0eaff6ead39685496",
                                         options=options, now_s=now_s)).body_for("tok")
    parsed: dict[str, Any] = orjson.loads(body)
    return parsed


@pytest.mark.parametrize("options", [
    None, EVERY_OPTION, SendOptions(ttl_s=0), SendOptions(priority="normal"),
    SendOptions(badge=0), SendOptions(click=ClickActions(web="https://example.com/a?b=c")),
])
def test_the_message_with_any_options_follows_googles_description(
        google: Validator, options: SendOptions | None) -> None:
    assert google.check(message(options)) is None


def test_each_option_lands_where_fcm_reads_it() -> None:
    sent = message(EVERY_OPTION)["message"]
    android, apns, webpush = sent["android"], sent["apns"], sent["webpush"]
    assert android["ttl"] == "3600s" and android["priority"] == "HIGH"
    assert android["notification"] == {"tag": "herald-6b0137d0eaff6ead39685496",
                                       "channel_id": "live_events", "sound": "default",
                                       "click_action": "OPEN_LIVE"}
    assert apns["headers"]["apns-expiration"] == str(int(NOW_S) + 3600)
    assert apns["headers"]["apns-priority"] == "10"
    assert apns["payload"] == {"aps": {"sound": "default", "badge": 3, "category": "LIVE_CATEGORY"}}
    assert webpush["headers"]["TTL"] == "3600" and webpush["headers"]["Urgency"] == "high"
    assert webpush["fcm_options"] == {"link": "https://example.com/live"}
    assert sent["fcm_options"] == {"analytics_label": "live-2026-11"}
    # the replacement key stays in every platform's block
    assert android["collapse_key"] == apns["headers"]["apns-collapse-id"]


@pytest.mark.filterwarnings("ignore:Message.token is deprecated:DeprecationWarning")
def test_herald_sends_each_option_as_firebase_admin_would() -> None:
    """firebase-admin's own encoder, given the same options, writes the same fields."""
    sdk = _messaging_encoder.MessageEncoder().default(messaging.Message(
        token="tok", fcm_options=messaging.FCMOptions(analytics_label="live-2026-11"),
        android=messaging.AndroidConfig(
            ttl=timedelta(seconds=3600), priority="high",
            notification=messaging.AndroidNotification(channel_id="live_events", sound="default",
                                                       click_action="OPEN_LIVE")),
        apns=messaging.APNSConfig(
            headers={"apns-priority": "10"},
            payload=messaging.APNSPayload(aps=messaging.Aps(sound="default", badge=3,
                                                            category="LIVE_CATEGORY"))),
        webpush=messaging.WebpushConfig(
            headers={"TTL": "3600", "Urgency": "high"},
            fcm_options=messaging.WebpushFCMOptions(link="https://example.com/live"))))
    ours = message(EVERY_OPTION)["message"]
    assert ours["android"]["ttl"] == sdk["android"]["ttl"]
    assert ours["android"]["priority"].lower() == sdk["android"]["priority"].lower()
    for field in ("channel_id", "sound", "click_action"):
        assert ours["android"]["notification"][field] == sdk["android"]["notification"][field]
    assert ours["apns"]["payload"] == sdk["apns"]["payload"]
    assert ours["webpush"]["fcm_options"] == sdk["webpush"]["fcm_options"]
    assert ours["fcm_options"] == sdk["fcm_options"]


@pytest.mark.parametrize("options", [
    {"ttl_s": -1}, {"ttl_s": 2_419_201}, {"priority": "urgent"}, {"badge": -1},
    {"analytics_label": "has space"}, {"analytics_label": "x" * 51},
    {"android_channel_id": ""}, {"sound": "../../etc/passwd"},
    {"click": {"web": "http://example.com/not-https"}}, {"click": {"web": "not a url"}},
    {"click": {"desktop": "x"}}, {"vibrate": True},
])
def test_the_api_refuses_options_fcm_would_refuse(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CampaignCreate.model_validate({"title": "t", "body": "b", "options": options})


def test_options_count_in_the_size_rule() -> None:
    body = "x" * (MAX_PAYLOAD_BYTES - 700)
    Content.model_validate({"title": "t", "body": body})
    with pytest.raises(ValidationError, match="bytes of JSON"):
        Content.model_validate({"title": "t", "body": body,
                                "options": EVERY_OPTION.model_dump()})


def test_follow_ups_may_change_the_options() -> None:
    request = RetargetRequest.model_validate({"options": {"ttl_s": 60}})
    assert request.options == SendOptions(ttl_s=60)
