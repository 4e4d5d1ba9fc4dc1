"""The app's data contract and FCM's size limit (herald/domain/payload.py, Content/CampaignCreate).

Sizes are checked against an independent measure: compact JSON from the standard library,
UTF-8 encoded, which is how FCM counts its 4096-byte limit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from herald.contracts.http import CampaignCreate, Content
from herald.domain.audience import Audience
from herald.domain.payload import (
    LONGEST_DEFAULT_KEY,
    MAX_PAYLOAD_BYTES,
    MessageTemplate,
    PayloadTooLarge,
    build_payload,
    check_payload_size,
    payload_size,
)


def json_bytes(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


KEY = "herald-6b0137d0eaff6ead39685496"


def content(**fields: Any) -> Content:
    return Content.model_validate({"title": "Hello", "body": "World", **fields})


# --- data keys -------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["landingUrl", "bibleCode", "a", "id", "x1", "deepLinkV2", "a" * 128])
def test_camel_case_data_keys_are_accepted(key: str) -> None:
    assert content(data={key: "v"}).data == {key: "v"}


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("bible_code", "bibleCode"),
        ("landing_url", "landingUrl"),
        ("deep_link_v2", "deepLinkV2"),
        ("landing-url", "landingUrl"),
        ("Bible_Code", "bibleCode"),
        ("campaign_id", "campaignId"),
    ],
)
def test_snake_case_data_keys_are_rejected_with_a_camel_case_hint(key: str, hint: str) -> None:
    with pytest.raises(ValidationError) as caught:
        content(data={key: "v"})
    message = str(caught.value)
    assert "camelCase" in message
    assert f"did you mean '{hint}'" in message


@pytest.mark.parametrize("key", ["", "1abc", "Landing", "landing url", "landing.url", "a$b", "ä",
                                 "a" * 129])
def test_keys_outside_the_camel_case_alphabet_are_rejected(key: str) -> None:
    with pytest.raises(ValidationError, match="camelCase"):
        content(data={key: "v"})


@pytest.mark.parametrize("key", ["landingUrl\n", "from\n", "bibleCode\r\n", " landingUrl", "\nx"])
def test_keys_with_surrounding_whitespace_are_rejected(key: str) -> None:
    """The camelCase pattern must match the whole key: a trailing newline is not camelCase."""
    with pytest.raises(ValidationError):
        content(data={key: "v"})


@pytest.mark.parametrize(
    "key",
    ["from", "notification", "message_type", "collapse_key", "google", "googleAnalytics",
     "googleCSenderId", "gcm", "gcmSenderId", "gcmx"],
)
def test_reserved_data_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValidationError):
        content(data={key: "v"})


@pytest.mark.parametrize("key", ["from", "notification", "googleAnalytics", "gcmSenderId"])
def test_camel_case_reserved_keys_are_reported_as_reserved(key: str) -> None:
    with pytest.raises(ValidationError, match="reserved by FCM"):
        content(data={key: "v"})


@pytest.mark.parametrize("key", ["fromUser", "notificationId", "messageType", "collapseKey", "goo",
                                 "gc", "myGoogleId"])
def test_keys_that_only_resemble_reserved_ones_are_accepted(key: str) -> None:
    assert key in content(data={key: "v"}).data


@pytest.mark.parametrize("value", [1, 0, 1.5, True, False, None, {"a": "b"}, ["a"]])
def test_non_string_data_values_are_rejected(value: object) -> None:
    with pytest.raises(ValidationError):
        content(data={"landingUrl": value})


def test_empty_string_data_value_is_accepted() -> None:
    assert content(data={"landingUrl": ""}).data == {"landingUrl": ""}


def test_at_most_one_hundred_data_keys() -> None:
    hundred = {f"k{i}": "" for i in range(100)}
    assert len(content(data=hundred).data) == 100
    with pytest.raises(ValidationError):
        content(data={**hundred, "k100": ""})


def test_unknown_content_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        content(sound="default")


# --- size limit ------------------------------------------------------------------------------------
def test_payload_size_is_bytes_of_compact_utf8_json() -> None:
    payload = build_payload("제목 \"quoted\"", "본문 😀 \\ /", {"k": "välue"}, "https://x.example/i.png",
                            replace_key=KEY)
    assert payload_size(payload) == json_bytes(payload)


def _sized(target: int, data: dict[str, str] | None = None,
           image_url: str | None = None) -> dict[str, Any]:
    """Title and body of ASCII padding (one byte per character) making the payload ``target`` bytes
    as sent with the longest key Herald derives.

    The padding is split between title and body so each stays within its own length limit.
    """
    data = data or {}

    def sent(title: str, body: str) -> dict[str, object]:
        return build_payload(title, body, data, image_url, replace_key=LONGEST_DEFAULT_KEY)

    missing = target - json_bytes(sent("", ""))
    title, body = "t" * 500, "b" * (missing - 500)
    assert json_bytes(sent(title, body)) == target
    fields: dict[str, Any] = {"title": title, "body": body, "data": data}
    if image_url:
        fields["image_url"] = image_url
    return fields


def test_payload_of_exactly_4096_bytes_is_accepted() -> None:
    fields = _sized(MAX_PAYLOAD_BYTES, data={"landingUrl": "https://example.com/a"})
    assert payload_size(Content.model_validate(fields).payload(LONGEST_DEFAULT_KEY)) == MAX_PAYLOAD_BYTES


def test_payload_of_4097_bytes_is_rejected() -> None:
    fields = _sized(MAX_PAYLOAD_BYTES + 1, data={"landingUrl": "https://example.com/a"})
    with pytest.raises(ValidationError, match="4097 bytes"):
        Content.model_validate(fields)


def test_image_url_counts_towards_the_limit() -> None:
    image = "https://cdn.example.com/a.png"
    Content.model_validate(_sized(MAX_PAYLOAD_BYTES, image_url=image))
    with pytest.raises(ValidationError, match="4097 bytes"):
        Content.model_validate(_sized(MAX_PAYLOAD_BYTES + 1, image_url=image))


def test_size_limit_counts_bytes_not_characters() -> None:
    body = "한" * 1400  # 1400 characters (within max_length), 4200 bytes of UTF-8
    with pytest.raises(ValidationError, match="FCM accepts at most 4096"):
        content(body=body)


def test_check_payload_size_raises_payload_too_large_with_the_size() -> None:
    payload = build_payload("T", "x" * 5000, {}, replace_key=KEY)
    with pytest.raises(PayloadTooLarge) as caught:
        check_payload_size(payload)
    assert caught.value.size == json_bytes(payload)
    assert isinstance(caught.value, ValueError)


def test_campaign_create_applies_the_same_size_limit() -> None:
    with pytest.raises(ValidationError, match="4097 bytes"):
        CampaignCreate.model_validate(_sized(MAX_PAYLOAD_BYTES + 1))
    fields = _sized(MAX_PAYLOAD_BYTES)
    assert CampaignCreate.model_validate(fields).body == fields["body"]


def test_campaign_create_defaults() -> None:
    campaign = CampaignCreate.model_validate({"title": "T", "body": "B"})
    assert campaign.audience == Audience()
    assert campaign.data == {}
    assert campaign.chunk_size == 500
    assert campaign.send_at is None
    assert campaign.timezone is None


@pytest.mark.parametrize(
    "extra",
    [{"data": {"bible_code": "x"}}, {"audience": {"platforms": ["symbian"]}}, {"chunk_size": 0},
     {"chunk_size": 5001}, {"rate_per_s": 0}, {"timezone": "Mars/Olympus"}, {"priority": "high"}],
)
def test_campaign_create_rejects_bad_fields(extra: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CampaignCreate.model_validate({"title": "T", "body": "B", **extra})


# --- payload and request body ----------------------------------------------------------------------
def test_build_payload_without_image_or_data() -> None:
    payload = build_payload("T", "B", {}, replace_key=KEY)
    assert payload["notification"] == {"title": "T", "body": "B"}
    assert "data" not in payload


def test_build_payload_with_image_and_data() -> None:
    payload = build_payload("T", "B", {"k": "v"}, "https://cdn.example.com/a.png", replace_key=KEY)
    assert payload["notification"] == {"title": "T", "body": "B",
                                       "image": "https://cdn.example.com/a.png"}
    assert payload["data"] == {"k": "v"}


def test_content_payload_includes_image_only_when_given() -> None:
    without = content().payload(KEY)["notification"]
    with_image = content(image_url="https://cdn.example.com/a.png").payload(KEY)["notification"]
    assert isinstance(without, dict)
    assert isinstance(with_image, dict)
    assert "image" not in without
    assert with_image["image"] == "https://cdn.example.com/a.png"


@pytest.mark.parametrize("url", ["ftp://cdn.example.com/a.png", "not a url", "/relative.png"])
def test_image_url_must_be_http(url: str) -> None:
    with pytest.raises(ValidationError):
        content(image_url=url)


@pytest.mark.parametrize(
    "token",
    ["plain-token", 'with"quote', "back\\slash", "유니코드-토큰", "emoji😀", "</script>", "a:b/c"],
)
def test_body_for_is_json_of_message_with_token_and_payload(token: str) -> None:
    payload = content(data={"landingUrl": "https://e.com/?a=1&b=\"2\""}, title="제목").payload(KEY)
    body = MessageTemplate(payload).body_for(token)
    assert json.loads(body) == {"message": {"token": token, **payload}}


def test_body_for_does_not_leak_between_tokens() -> None:
    template = MessageTemplate(build_payload("T", "B", {"k": "v"}, replace_key=KEY))
    first, second = template.body_for("one"), template.body_for("two")
    assert json.loads(first)["message"]["token"] == "one"
    assert json.loads(second)["message"]["token"] == "two"


@given(token=st.text(min_size=1, max_size=200),
       title=st.text(min_size=1, max_size=50),
       data=st.dictionaries(st.sampled_from(["a", "landingUrl", "k2"]), st.text(max_size=20)))
def test_body_for_any_token_and_content_is_valid_json(token: str, title: str,
                                                      data: dict[str, str]) -> None:
    payload = build_payload(title, "body", data, replace_key=KEY)
    body = MessageTemplate(payload).body_for(token)
    assert json.loads(body) == {"message": {"token": token, **payload}}
