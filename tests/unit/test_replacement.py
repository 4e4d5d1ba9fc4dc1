"""The replacement key (herald/domain/payload.py, CampaignCreate, KeyedContent): on every platform
block, validated as FCM, APNs and web push would, and counted in FCM's 4096-byte limit.

Sizes are checked against an independent measure: compact JSON from the standard library, UTF-8
encoded, of the whole request body minus the token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import string
from typing import Any

import pytest
from firebase_admin import messaging
from firebase_admin._messaging_encoder import MessageEncoder
from hypothesis import assume, event, given
from hypothesis import strategies as st
from pydantic import ValidationError

from herald.contracts.http import CampaignCreate, Content, KeyedContent
from herald.domain.payload import (
    LONGEST_DEFAULT_KEY,
    MAX_PAYLOAD_BYTES,
    MAX_REPLACE_KEY_BYTES,
    MessageTemplate,
    build_payload,
    default_replace_key,
    replace_key_for,
    web_push_topic,
)

CAMPAIGN_ID = "6b0137d0eaff6ead39685496"
KEY_ALPHABET = string.ascii_letters + string.digits + "_-.:"
RFC_8030_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")

keys = st.text(alphabet=KEY_ALPHABET, min_size=1, max_size=MAX_REPLACE_KEY_BYTES)
object_ids = st.text(alphabet="0123456789abcdef", min_size=24, max_size=24)


def json_bytes(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def sent_bytes(payload: dict[str, object], token: str = "t") -> int:
    """Bytes of the request body FCM receives, minus the token and its wrapper."""
    body = json.loads(MessageTemplate(payload).body_for(token))
    del body["message"]["token"]
    return json_bytes(body["message"])


def create(**fields: Any) -> CampaignCreate:
    return CampaignCreate.model_validate({"title": "Hello", "body": "World", **fields})


# --- where the key goes ----------------------------------------------------------------------------
def test_the_default_key_is_derived_from_the_campaign_id() -> None:
    assert default_replace_key(CAMPAIGN_ID) == f"herald-{CAMPAIGN_ID}"
    assert replace_key_for(CAMPAIGN_ID, None) == f"herald-{CAMPAIGN_ID}"


def test_a_named_key_wins_over_the_default() -> None:
    assert replace_key_for(CAMPAIGN_ID, "promo:2026.11") == "promo:2026.11"


@given(campaign_id=object_ids)
def test_every_default_key_is_as_long_as_the_one_the_size_rule_counts(campaign_id: str) -> None:
    assert len(default_replace_key(campaign_id)) == len(LONGEST_DEFAULT_KEY)
    assert web_push_topic(default_replace_key(campaign_id)) == default_replace_key(campaign_id)


def test_the_key_is_on_every_platform_block() -> None:
    key = default_replace_key(CAMPAIGN_ID)
    payload = build_payload("T", "B", {"landingUrl": "https://e.com"}, replace_key=key)
    assert payload["android"] == {"collapse_key": key, "notification": {"tag": key}}
    assert payload["apns"] == {"headers": {"apns-collapse-id": key}}
    assert payload["webpush"] == {"headers": {"Topic": key}, "notification": {"tag": key}}
    assert payload["notification"] == {"title": "T", "body": "B"}
    assert payload["data"] == {"landingUrl": "https://e.com"}


@pytest.mark.parametrize("key", ["herald-6b0137d0eaff6ead39685496", "promo:2026.11"])
def test_the_fields_are_those_firebase_admin_writes_for_the_same_options(key: str) -> None:
    """The official SDK's encoder, given the same options, writes the same message."""
    message = messaging.Message(
        fid="device", notification=messaging.Notification("T", "B"), data={"k": "v"},
        android=messaging.AndroidConfig(
            collapse_key=key, notification=messaging.AndroidNotification(tag=key)),
        apns=messaging.APNSConfig(headers={"apns-collapse-id": key}),
        webpush=messaging.WebpushConfig(headers={"Topic": web_push_topic(key)},
                                        notification=messaging.WebpushNotification(tag=key)))
    encoded = json.loads(json.dumps(message, cls=MessageEncoder))
    del encoded["fid"]
    assert build_payload("T", "B", {"k": "v"}, replace_key=key) == encoded


def test_the_request_body_carries_the_key_for_every_token() -> None:
    key = "promo:2026.11"
    template = MessageTemplate(build_payload("T", "B", {}, replace_key=key))
    for token in ("one", 'with"quote', "유니코드"):
        message = json.loads(template.body_for(token))["message"]
        assert message["token"] == token
        assert message["android"]["notification"]["tag"] == key
        assert message["android"]["collapse_key"] == key
        assert message["apns"]["headers"]["apns-collapse-id"] == key
        assert message["webpush"]["notification"]["tag"] == key
        assert message["webpush"]["headers"]["Topic"] == web_push_topic(key)


def test_content_payload_takes_the_key_it_is_sent_with() -> None:
    payload = Content.model_validate({"title": "T", "body": "B"}).payload("k1")
    assert payload["apns"] == {"headers": {"apns-collapse-id": "k1"}}


# --- web push Topic (RFC 8030 §5.4) ----------------------------------------------------------------
@pytest.mark.parametrize("key", ["a", "herald-6b0137d0eaff6ead39685496", "A_b-9", "x" * 32])
def test_a_key_that_is_a_valid_topic_is_the_topic(key: str) -> None:
    assert web_push_topic(key) == key


@pytest.mark.parametrize("key", ["promo:2026", "v1.2", "x" * 33, "x" * 64])
def test_any_other_key_becomes_32_characters_of_its_sha256(key: str) -> None:
    expected = base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()).decode()[:32]
    assert web_push_topic(key) == expected


@given(key=keys)
def test_every_valid_key_gives_a_valid_topic_always_the_same(key: str) -> None:
    topic = web_push_topic(key)
    assert RFC_8030_TOPIC.fullmatch(topic)
    assert web_push_topic(key) == topic


@given(first=keys, second=keys)
def test_different_keys_give_different_topics(first: str, second: str) -> None:
    assume(first != second)
    assert web_push_topic(first) != web_push_topic(second)


# --- a campaign's own key --------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["a", "Z", "0", "promo:2026.11", "daily-digest_v2", "x" * 64,
                                 "herald-6b0137d0eaff6ead39685496", "..", "-:_"])
def test_named_keys_in_the_alphabet_up_to_64_characters_are_accepted(key: str) -> None:
    assert create(replace_key=key).replace_key == key


@pytest.mark.parametrize("key", ["", "x" * 65, "with space", "a/b", "é", "한", "😀", "a\nb", "abc\n",
                                 " abc", "tab\t", 'quo"te', "back\\slash", "semi;colon", "a=b",
                                 "\x00"])
def test_keys_outside_the_alphabet_or_too_long_are_refused_saying_what_is_allowed(key: str) -> None:
    with pytest.raises(ValidationError) as caught:
        create(replace_key=key)
    message = str(caught.value)
    assert "replace_key" in message
    assert "1 to 64 characters" in message
    assert "ASCII letter, a digit, '_', '-', '.' or ':'" in message


@pytest.mark.parametrize("key", [42, 1.5, True, ["a"], {"a": "b"}])
def test_a_key_that_is_not_a_string_is_refused(key: object) -> None:
    with pytest.raises(ValidationError):
        create(replace_key=key)


def test_the_key_is_optional_and_defaults_to_none() -> None:
    assert create().replace_key is None


@given(key=keys)
def test_any_key_of_the_alphabet_up_to_64_is_accepted(key: str) -> None:
    assert create(replace_key=key).replace_key == key


@given(prefix=st.text(alphabet=KEY_ALPHABET, max_size=30),
       bad=st.characters(exclude_characters=KEY_ALPHABET),
       suffix=st.text(alphabet=KEY_ALPHABET, max_size=30))
def test_any_key_with_one_character_outside_the_alphabet_is_refused(prefix: str, bad: str,
                                                                    suffix: str) -> None:
    with pytest.raises(ValidationError):
        create(replace_key=prefix + bad + suffix)


@given(key=keys)
def test_every_accepted_key_fits_the_apns_collapse_id_limit(key: str) -> None:
    accepted = create(replace_key=key).replace_key
    assert accepted is not None and len(accepted.encode()) <= 64


# --- FCM's 4096 bytes, with the key ------------------------------------------------------------------
def _padded(target: int, key: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    """Title and body of ASCII padding making the message sent with ``key`` ``target`` bytes."""
    data = data or {}
    missing = target - sent_bytes(build_payload("", "", data, replace_key=key))
    title, body = "t" * 500, "b" * (missing - 500)
    assert sent_bytes(build_payload(title, body, data, replace_key=key)) == target
    return {"title": title, "body": body, "data": data}


def test_the_size_rule_counts_the_whole_message_as_sent() -> None:
    key = "x" * 64
    payload = build_payload("제목", "본문 😀", {"k": "v"}, "https://x.example/i.png", replace_key=key)
    without_key = {k: v for k, v in payload.items() if k in ("notification", "data")}
    assert sent_bytes(payload) == json_bytes(payload)
    assert json_bytes(payload) - json_bytes(without_key) > 5 * 64  # five copies of the key


def test_without_a_named_key_the_longest_default_key_is_counted() -> None:
    fields = _padded(MAX_PAYLOAD_BYTES, LONGEST_DEFAULT_KEY)
    assert create(**fields).replace_key is None
    with pytest.raises(ValidationError, match="4097 bytes"):
        create(**_padded(MAX_PAYLOAD_BYTES + 1, LONGEST_DEFAULT_KEY))


def test_a_named_key_is_counted_as_it_is_sent() -> None:
    key = "k" * 64
    assert create(replace_key=key, **_padded(MAX_PAYLOAD_BYTES, key)).replace_key == key
    with pytest.raises(ValidationError, match="4097 bytes"):
        create(replace_key=key, **_padded(MAX_PAYLOAD_BYTES + 1, key))


def test_content_that_fits_with_the_default_key_can_be_too_big_with_a_longer_one() -> None:
    fields = _padded(MAX_PAYLOAD_BYTES, LONGEST_DEFAULT_KEY)
    create(**fields)
    with pytest.raises(ValidationError, match="FCM accepts at most 4096"):
        create(replace_key="k" * 64, **fields)


def test_a_shorter_named_key_leaves_room_for_more_content() -> None:
    fields = _padded(MAX_PAYLOAD_BYTES, "k")
    with pytest.raises(ValidationError):
        create(**fields)
    assert create(replace_key="k", **fields).replace_key == "k"


def test_keyed_content_checks_the_size_with_its_key() -> None:
    """What an amend uses: new content, sent with the original's key."""
    key = "k" * 64
    fitting = _padded(MAX_PAYLOAD_BYTES, key)
    assert KeyedContent.model_validate({**fitting, "replace_key": key}).replace_key == key
    with pytest.raises(ValidationError, match="4097 bytes"):
        KeyedContent.model_validate({**_padded(MAX_PAYLOAD_BYTES + 1, key), "replace_key": key})


@pytest.mark.parametrize("key", ["", "x" * 65, "a b"])
def test_keyed_content_refuses_an_invalid_key(key: str) -> None:
    with pytest.raises(ValidationError, match="replace_key"):
        KeyedContent.model_validate({"title": "T", "body": "B", "replace_key": key})


def test_the_largest_content_with_the_longest_key_stays_within_4096_bytes() -> None:
    key = "k" * MAX_REPLACE_KEY_BYTES
    fields = _padded(MAX_PAYLOAD_BYTES, key, data={"landingUrl": "https://example.com/live"})
    campaign = create(replace_key=key, **fields)
    assert sent_bytes(campaign.payload(key), token="x" * 163) == MAX_PAYLOAD_BYTES


@given(title=st.text(min_size=1, max_size=1000), body=st.text(min_size=1, max_size=4000),
       data=st.dictionaries(st.sampled_from(["landingUrl", "bibleCode", "a", "deepLinkV2"]),
                            st.text(max_size=800), max_size=4),
       key=st.none() | keys, campaign_id=object_ids)
def test_whatever_is_accepted_is_sent_within_4096_bytes(title: str, body: str, data: dict[str, str],
                                                        key: str | None, campaign_id: str) -> None:
    try:
        campaign = create(title=title, body=body, data=data, replace_key=key)
    except ValidationError:
        event("refused")
        return
    event("accepted")
    sent_key = replace_key_for(campaign_id, campaign.replace_key)
    assert sent_bytes(campaign.payload(sent_key)) <= MAX_PAYLOAD_BYTES


@given(filler=st.sampled_from(["b", "é", "한", "😀", '"', "\\", "\n"]), offset=st.integers(-3, 3),
       title=st.text(min_size=1, max_size=20), key=st.none() | keys, campaign_id=object_ids)
def test_at_the_limit_whatever_is_accepted_is_sent_within_4096_bytes(
        filler: str, offset: int, title: str, key: str | None, campaign_id: str) -> None:
    """Bodies of one- to four-byte characters (and characters JSON escapes) sized to land within
    a few characters of the limit, on either side."""
    sent_key = replace_key_for(campaign_id, key)
    room = MAX_PAYLOAD_BYTES - sent_bytes(build_payload(title, "", {}, replace_key=sent_key))
    per_character = json_bytes(filler) - 2
    body = filler * max(1, room // per_character + offset)
    try:
        campaign = create(title=title, body=body, replace_key=key)
    except ValidationError:
        event("refused")
        return
    event("accepted")
    size = sent_bytes(campaign.payload(sent_key))
    assert size <= MAX_PAYLOAD_BYTES
    assert MAX_PAYLOAD_BYTES - size < 4 * per_character
