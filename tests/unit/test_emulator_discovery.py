"""The emulator's validator (fcm_emulator/discovery.py) checks bodies against Google's FCM v1
discovery document, read from google-api-python-client at run time, and FCM's documented rules.

Two oracles the project did not write: the document itself, and firebase-admin's own encoder
(``MessageEncoder``), whose JSON is what the official SDK sends and FCM accepts.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest
from firebase_admin import messaging
from firebase_admin._messaging_encoder import MessageEncoder

from fcm_emulator.discovery import Validator, Violation, proto_name
from herald.domain.payload import MessageTemplate, build_payload

REPO = Path(__file__).resolve().parents[2]
# firebase-admin 7.5+ warns on Message.token (deprecated for fid); tokens still work, Herald sends them.
pytestmark = pytest.mark.filterwarnings("ignore:Message.token is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator()


def check(validator: Validator, message: dict[str, Any], **request: Any) -> Violation | None:
    return validator.check({"message": message, **request})


def encoded(message: messaging.Message) -> dict[str, Any]:
    """The JSON firebase-admin sends for ``message``, through its own encoder."""
    return json.loads(json.dumps(MessageEncoder().default(message)))


# --- the document ----------------------------------------------------------------------------------
def test_the_schema_is_google_s_document_from_the_installed_package(validator: Validator) -> None:
    shipped = resources.files("googleapiclient").joinpath(
        "discovery_cache", "documents", "fcm.v1.json")
    document = json.loads(shipped.read_text(encoding="utf-8"))
    assert validator.revision == document["revision"] and len(validator.revision) == 8
    assert validator.document["schemas"]["Message"] == document["schemas"]["Message"]


def test_no_copy_of_the_document_is_kept_in_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert not [path for path in tracked if path.endswith("fcm.v1.json")]


@pytest.mark.parametrize(("camel", "proto"), [("collapseKey", "collapse_key"),
                                              ("androidV2", "android_v2"), ("ttl", "ttl"),
                                              ("useAsV1DataMessage", "use_as_v1_data_message")])
def test_proto_names_are_derived_from_the_json_names(camel: str, proto: str) -> None:
    assert proto_name(camel) == proto


# --- what Herald and firebase-admin send is accepted -----------------------------------------------
def test_herald_s_body_is_accepted(validator: Validator) -> None:
    payload = build_payload("Live now", "The stream starts", {"landingUrl": "https://x.test/a",
                                                              "bibleCode": "KJV"},
                            "https://x.test/i.png", replace_key="promo:2026.11")
    body = orjson.loads(MessageTemplate(payload).body_for("token-1"))
    assert validator.check(body) is None


def every_option(**target: str) -> messaging.Message:
    """A message with every option firebase-admin can encode."""
    return messaging.Message(
        data={"landingUrl": "https://x.test"},
        notification=messaging.Notification(title="T", body="B", image="https://x.test/i.png"),
        android=messaging.AndroidConfig(
            collapse_key="promo", priority="high", ttl=datetime.timedelta(hours=1, microseconds=5),
            restricted_package_name="com.example", data={"k": "v"},
            notification=messaging.AndroidNotification(
                title="T", body="B", icon="ic", color="#ff0000", sound="default", tag="promo",
                click_action="OPEN_ACTIVITY", body_loc_key="b", body_loc_args=["1"],
                title_loc_key="t", title_loc_args=["2"], channel_id="news",
                image="https://x.test/i.png", ticker="tick", sticky=True,
                event_timestamp=datetime.datetime(2026, 11, 24, 9, 30, tzinfo=datetime.UTC),
                local_only=True, priority="max", vibrate_timings_millis=[100, 250.5],
                default_vibrate_timings=False, default_sound=True,
                light_settings=messaging.LightSettings("#00ff0080", 100, 200),
                default_light_settings=False, visibility="public", notification_count=3,
                proxy="if_priority_lowered"),
            fcm_options=messaging.AndroidFCMOptions(analytics_label="android_label"),
            direct_boot_ok=True, bandwidth_constrained_ok=False, restricted_satellite_ok=True),
        apns=messaging.APNSConfig(
            headers={"apns-priority": "10", "apns-expiration": "1800000000",
                     "apns-collapse-id": "promo"},
            payload=messaging.APNSPayload(
                aps=messaging.Aps(alert=messaging.ApsAlert(title="T", body="B", loc_key="k",
                                                                   loc_args=["a"]),
                                  badge=3, sound=messaging.CriticalSound("s", critical=True,
                                                                         volume=0.5),
                                  category="NEWS", thread_id="th", mutable_content=True,
                                  content_available=True, custom_data={"x": [1, {"y": None}]}),
                extra={"nested": True}),
            fcm_options=messaging.APNSFCMOptions(analytics_label="ios.label~1%",
                                                 image="https://x.test/i.png"),
            live_activity_token="live"),
        webpush=messaging.WebpushConfig(
            headers={"TTL": "300", "Urgency": "high", "Topic": "promo"}, data={"k": "v"},
            notification=messaging.WebpushNotification(
                title="T", body="B", icon="https://x.test/i.png",
                actions=[messaging.WebpushNotificationAction("open", "Open", icon="i")],
                badge="b", data={"any": ["json"]}, direction="auto", image="https://x.test/i.png",
                language="en", renotify=True, require_interaction=True, silent=False,
                tag="promo", timestamp_millis=1_800_000_000_000, vibrate=[100, 50],
                custom_data={"k": 1}),
            fcm_options=messaging.WebpushFCMOptions(link="https://x.test/l")),
        fcm_options=messaging.FCMOptions(analytics_label="campaign-2026_11"),
        **target)


@pytest.mark.parametrize("target", [{"token": "t"}, {"topic": "news"}, {"fid": "f"},
                                    {"condition": "'news' in topics && 'sport' in topics"}])
def test_firebase_admin_s_encoding_of_every_option_is_accepted(validator: Validator,
                                                               target: dict[str, str]) -> None:
    body = encoded(every_option(**target))
    assert body["android"]["notification"]["click_action"] == "OPEN_ACTIVITY"  # snake_case, sent so
    assert check(validator, body) is None
    assert check(validator, body, validate_only=True) is None  # firebase-admin's dry_run


@pytest.mark.parametrize("ttl", [0, 1, 2_419_200, 0.5])
def test_firebase_admin_s_ttls_within_four_weeks_are_accepted(validator: Validator,
                                                              ttl: float) -> None:
    message = messaging.Message(token="t", android=messaging.AndroidConfig(ttl=ttl))
    assert check(validator, encoded(message)) is None


@pytest.mark.parametrize("message", [
    {"token": "t", "android": {"collapseKey": "k", "notification": {"clickAction": "A"}}},
    {"token": "t", "android": {"priority": "normal"}},  # lower case: as firebase-admin sends it
    {"token": "t", "android": {"priority": 1}},  # proto3 JSON: an enum's number
    {"token": "t", "android": {"notification": {"notification_count": "7"}}},  # int32 as string
    {"token": "t", "android": {"notification": {"notificationCount": 7.0}}},
    {"token": "t", "notification": None, "topic": None},  # null: not set
    {"token": "t", "android": {"ttl": "-0s"}},
    {"token": "t", "android": {"notification": {"event_time": "2026-11-24T09:30:00.5+09:00"}}},
    {"token": "t", "android": {"notification": {"light_settings": {"color": {"red": "NaN"}}}}},
    {"token": "t", "androidV2": {"ttl": "60s", "backgroundSync": {}}},
    {"token": "t", "apns": {"payload": {"aps": {}, "anything": [1, None, {"a": "b"}]}}},
])
def test_what_proto3_json_allows_is_accepted(validator: Validator, message: dict[str, Any]) -> None:
    assert check(validator, message) is None


# --- what is refused, and how Google names it ------------------------------------------------------
def test_an_unknown_field_is_refused(validator: Validator) -> None:
    violation = check(validator, {"token": "t", "foo": 1})
    assert violation == Violation("message", 'Invalid JSON payload received. Unknown name "foo" '
                                             "at 'message': Cannot find field.")


def test_an_unknown_field_deep_down_and_at_the_top(validator: Validator) -> None:
    deep = check(validator, {"token": "t", "android": {"notification": {"badge": 1}}})
    assert deep is not None and deep.field == "message.android.notification"
    top = validator.check({"message": {"token": "t"}, "dry_run": True})
    assert top == Violation("", 'Invalid JSON payload received. Unknown name "dry_run": Cannot '
                                'find field.')


def test_a_data_value_that_is_not_a_string_is_refused(validator: Validator) -> None:
    violation = check(validator, {"token": "t", "data": {"a": "1", "count": 3}})
    assert violation == Violation("message.data[1].value",
                                  "Invalid value at 'message.data[1].value' (TYPE_STRING), 3")


@pytest.mark.parametrize("ttl", ["3600", "1h", "3600 s", "1.1234567891s", 3600, "s"])
def test_a_bad_duration_is_refused(validator: Validator, ttl: Any) -> None:
    violation = check(validator, {"token": "t", "android": {"ttl": ttl}})
    assert violation is not None and violation.field == "message.android.ttl"
    assert "google.protobuf.Duration" in violation.description
    assert "Invalid duration" in violation.description


@pytest.mark.parametrize("ttl", ["2419201s", "2419200.000000001s", "-1s"])
def test_a_ttl_beyond_four_weeks_or_negative_is_refused(validator: Validator, ttl: str) -> None:
    violation = check(validator, {"token": "t", "android": {"ttl": ttl}})
    assert violation is not None and violation.field == "message.android.ttl"
    assert violation.rule == "fcm"


@pytest.mark.parametrize(("field", "value"), [("priority", "URGENT"), ("priority", "hi"),
                                              ("priority", True)])
def test_a_bad_enum_value_is_refused(validator: Validator, field: str, value: Any) -> None:
    violation = check(validator, {"token": "t", "android": {field: value}})
    assert violation is not None and violation.field == "message.android.priority"


def test_two_targets_are_refused(validator: Validator) -> None:
    violation = check(validator, {"token": "t", "topic": "news"})
    assert violation == Violation("message", "Invalid value at 'message' (oneof), oneof field "
                                             "'target' is already set. Cannot set 'topic'", "fcm")


def test_no_target_is_refused(validator: Validator) -> None:
    violation = check(validator, {"notification": {"title": "T"}})
    assert violation == Violation("message", "Recipient of the message is not set.", "fcm")


@pytest.mark.parametrize("key", ["from", "message_type", "google.c.a.e", "gcm.notification.body"])
def test_a_reserved_data_key_is_refused(validator: Validator, key: str) -> None:
    violation = check(validator, {"token": "t", "data": {"ok": "1", key: "x"}})
    assert violation is not None and violation.field == "message.data[1].key"
    assert violation.rule == "fcm"


@pytest.mark.parametrize("key", ["fromage", "google", "gcm", "gcm.n.e", "collapse_key"])
def test_only_the_reserved_data_keys_google_documents_are_refused(validator: Validator,
                                                                  key: str) -> None:
    assert check(validator, {"token": "t", "data": {key: "x"}}) is None


def test_a_field_named_in_both_spellings_is_refused(validator: Validator) -> None:
    violation = check(validator, {"token": "t", "android": {"collapse_key": "a", "collapseKey": "b"}})
    assert violation is not None and violation.field == "message.android"
    assert "'collapse_key'" in violation.description


def test_map_keys_are_not_field_names(validator: Validator) -> None:
    """``data`` is a map: ``collapse_key`` and ``collapseKey`` there are two keys of the app's."""
    assert check(validator, {"token": "t", "data": {"collapse_key": "a", "collapseKey": "b"}}) is None


@pytest.mark.parametrize("label", ["", "a" * 51, "with space", "emoji-\u2603", "a/b"])
def test_a_malformed_analytics_label_is_refused(validator: Validator, label: str) -> None:
    for message, path in [({"fcm_options": {"analytics_label": label}}, "message.fcm_options"),
                          ({"apns": {"fcmOptions": {"analyticsLabel": label}}},
                           "message.apns.fcm_options")]:
        violation = check(validator, {"token": "t", **message})
        assert violation is not None and violation.field == f"{path}.analytics_label"


def test_android_and_android_v2_together_are_refused(validator: Validator) -> None:
    violation = check(validator, {"token": "t", "android": {}, "android_v2": {}})
    assert violation is not None and violation.field == "message" and violation.rule == "fcm"


@pytest.mark.parametrize(("message", "field"), [
    ({"token": 7}, "message.token"),
    ({"token": "t", "notification": "hello"}, "message.notification"),
    ({"token": "t", "data": ["a"]}, "message.data"),
    ({"token": "t", "data": {"a": None}}, "message.data[0].value"),
    ({"token": "t", "android": {"direct_boot_ok": "true"}}, "message.android.direct_boot_ok"),
    ({"token": "t", "android": {"notification": {"notification_count": 2**31}}},
     "message.android.notification.notification_count"),
    ({"token": "t", "android": {"notification": {"notification_count": 1.5}}},
     "message.android.notification.notification_count"),
    ({"token": "t", "android": {"notification": {"event_time": "2026-02-30T00:00:00Z"}}},
     "message.android.notification.event_time"),
    ({"token": "t", "android": {"notification": {"body_loc_args": ["a", 3]}}},
     "message.android.notification.body_loc_args[1]"),
    ({"token": "t", "android": {"notification": {"vibrate_timings": ["1s", "x"]}}},
     "message.android.notification.vibrate_timings[1]"),
    ({"token": "t", "apns": {"payload": "aps"}}, "message.apns.payload"),
])
def test_a_value_of_the_wrong_type_is_refused_at_its_path(validator: Validator,
                                                          message: dict[str, Any],
                                                          field: str) -> None:
    violation = check(validator, message)
    assert violation is not None and violation.field == field
    assert violation.description.startswith(f"Invalid value at '{field}' (")


@pytest.mark.parametrize("body", [[], "message", {}, {"message": None}, {"validateOnly": "yes",
                                                                         "message": {"token": "t"}}])
def test_a_request_that_is_not_a_send_message_request_is_refused(validator: Validator,
                                                                  body: Any) -> None:
    assert validator.check(body) is not None


@pytest.mark.parametrize("topic", ["/topics/news", "news sport", "", "a" * 901, "caf\u00e9"])
def test_a_malformed_topic_is_refused(validator: Validator, topic: str) -> None:
    violation = check(validator, {"topic": topic})
    assert violation is not None and violation.field == "message.topic"


@pytest.mark.parametrize("topic", ["news", "a" * 900, "Weather-2026_11.~%"])
def test_a_topic_name_google_allows_is_accepted(validator: Validator, topic: str) -> None:
    assert check(validator, {"topic": topic}) is None


@pytest.mark.parametrize(("link", "refused"), [("https://x.test/l", False), ("http://x.test/l", True),
                                               ("x.test/l", True)])
def test_a_web_push_link_must_be_https(validator: Validator, link: str, refused: bool) -> None:
    violation = check(validator, {"token": "t", "webpush": {"fcmOptions": {"link": link}}})
    assert (violation is not None) is refused
    assert violation is None or violation.field == "message.webpush.fcm_options.link"
