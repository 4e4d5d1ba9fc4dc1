"""Every string a device or a campaign carries has a bound that fits its meaning, and the
largest campaign a body can hold is a number the api can refuse bodies by (issue 31):
``herald/domain/types.py``, ``herald/domain/audience.py``, ``herald/domain/payload.py``,
``herald/contracts/sizes.py``."""

from __future__ import annotations

import json
import string
from itertools import product
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from herald.contracts.http import CampaignCreate, DeviceIn
from herald.contracts.sizes import CAMPAIGN_BODY_MAX_BYTES
from herald.domain.audience import (
    MAX_AUDIENCE_ATTRIBUTES,
    MAX_AUDIENCE_LOCALES,
    MAX_AUDIENCE_TOPICS,
    MAX_AUDIENCE_USER_IDS,
    MAX_CONDITION_VALUES,
)
from herald.domain.payload import (
    MAX_PAYLOAD_BYTES,
    PayloadTooLarge,
    build_payload,
    payload_size,
)
from herald.domain.rendering import MAX_TRANSLATIONS
from herald.domain.types import (
    MAX_ATTRIBUTE_TEXT_CHARS,
    MAX_CONDITION_TEXT_CHARS,
    MAX_TOPIC_CHARS,
    MAX_USER_ID_CHARS,
)

DEVICE = {"token": "tok-1", "platform": "android"}


# --- devices ---------------------------------------------------------------------------------------
def test_a_60_kb_locale_is_refused_at_registration_and_a_35_character_one_accepted() -> None:
    with pytest.raises(ValidationError, match="at most 35 characters"):
        DeviceIn.model_validate({**DEVICE, "locale": "es-" + "-".join(["abcdefgh"] * 6666)})
    longest = "zh_Hant_TW_" + "_".join(["abcdefgh"] * 2) + "_abcdef"
    assert DeviceIn.model_validate({**DEVICE, "locale": longest}).locale == longest


@pytest.mark.parametrize(("field", "value", "message"), [
    ("attributes", {"bio": "x" * (MAX_ATTRIBUTE_TEXT_CHARS + 1)}, "at most 1024 characters"),
    ("user_id", "u" * (MAX_USER_ID_CHARS + 1), "at most 128 characters"),
    ("topics", ["t" * (MAX_TOPIC_CHARS + 1)], "should match pattern"),
    ("timezone", "Europe/" + "x" * 60, "at most 64 characters"),
    ("token", "t" * 4097, "at most 4096 characters"),
])
def test_each_text_a_device_carries_is_bounded(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        DeviceIn.model_validate({**DEVICE, field: value})


def test_an_attribute_of_1024_characters_is_accepted() -> None:
    text = "x" * MAX_ATTRIBUTE_TEXT_CHARS
    assert DeviceIn.model_validate({**DEVICE, "attributes": {"bio": text}}).attributes == {
        "bio": text}


# --- campaigns -------------------------------------------------------------------------------------
def test_a_data_value_longer_than_a_message_is_too_large_before_anything_else() -> None:
    with pytest.raises(ValidationError) as refused:
        CampaignCreate.model_validate({"title": "t", "body": "b",
                                       "data": {"link": "{{ (((((" + "x" * 5000}})
    (error,) = refused.value.errors()
    assert isinstance(error["ctx"]["error"], PayloadTooLarge)
    assert "is over 5008 bytes" in error["msg"]


def test_a_cron_expression_is_at_most_120_characters() -> None:
    from herald.contracts.http import ScheduleCreate

    with pytest.raises(ValidationError, match="at most 120 characters"):
        ScheduleCreate.model_validate({"template": {"title": "t", "body": "b"},
                                       "cron": "0 " * 61, "timezone": "UTC"})


def test_an_image_link_is_at_most_2083_characters() -> None:
    with pytest.raises(ValidationError, match="at most 2083 characters"):
        CampaignCreate.model_validate({"title": "t", "body": "b",
                                       "image_url": "https://x.example/" + "a" * 2100})


# --- the largest campaign --------------------------------------------------------------------------
KEY = "k" * 64
WIDE = "é"
"""Two bytes of UTF-8, six as a JSON escape (``\\u00e9``): the costliest character per byte of a
message."""


def _filled(title: str, data: dict[str, str]) -> str:
    """The longest body of ``WIDE`` characters that keeps the message within FCM's size."""
    def size(body: str) -> int:
        return payload_size(build_payload(title, body, data, replace_key=KEY))
    body = WIDE * ((MAX_PAYLOAD_BYTES - size("")) // len(WIDE.encode()))
    assert size(body) <= MAX_PAYLOAD_BYTES < size(body + WIDE + WIDE)
    return body


def _languages() -> list[str]:
    return ["".join(pair) for pair in product(string.ascii_lowercase, repeat=2)]


def _tags() -> list[str]:
    """Language tags of 35 characters, all different."""
    return [f"{language}-x-abcdefgh-abcdefgh-abcdefgh-abc"
            for language in _languages()[:MAX_TRANSLATIONS]]


def largest_campaign() -> dict[str, Any]:
    """A campaign at every limit at once, in the characters that cost most once escaped."""
    title = WIDE * 10
    conditions = {"a00": {"in": [f"{i:04d}" + WIDE * (MAX_CONDITION_TEXT_CHARS - 4)
                                 for i in range(MAX_CONDITION_VALUES)]}}
    conditions.update({f"a{i:02d}{'b' * 60}": {op: WIDE * MAX_CONDITION_TEXT_CHARS
                                               for op in ("gt", "gte", "lt", "lte")}
                       for i in range(1, MAX_AUDIENCE_ATTRIBUTES)})
    return {
        "name": WIDE * 200, "title": title, "body": _filled(title, {}),
        "translations": {tag: {"title": title, "body": _filled(title, {})} for tag in _tags()},
        "audience": {
            "user_ids": [f"{i:04d}" + WIDE * (MAX_USER_ID_CHARS - 4)
                         for i in range(MAX_AUDIENCE_USER_IDS)],
            "topics": [f"{i:03d}" + "t" * (MAX_TOPIC_CHARS - 3) for i in range(MAX_AUDIENCE_TOPICS)],
            "locales": [f"{language}-abcdefgh-abcdefgh-abcdefgh-abcde"
                        for language in _languages()[:MAX_AUDIENCE_LOCALES]],
            "attributes": conditions,
        },
        "chunk_size": 5000, "rate_per_s": 1_000_000, "replace_key": KEY,
        "send_at": "2026-12-01T09:00:00", "timezone": "America/Argentina/ComodRivadavia",
        "deliver_in_local_time": True,
        "rollout": {"waves": [{"percent": 5 * (i + 1), "hold_s": 604_800} for i in range(20)],
                    "halt_when": {"failure_rate_above": 0.999, "min_attempts": 1_000_000_000}},
    }


def test_the_largest_campaign_is_valid_and_fits_the_bound_however_it_is_written() -> None:
    campaign = largest_campaign()
    CampaignCreate.model_validate(campaign)  # valid: every limit reached, none passed
    escaped = json.dumps(campaign).encode()  # Python's default: \\uXXXX, ", " and ": "
    plain = orjson.dumps(campaign)
    print(f"\nthe largest campaign: {len(escaped):,} bytes escaped, {len(plain):,} as UTF-8; "
          f"the bound {CAMPAIGN_BODY_MAX_BYTES:,}")
    assert len(plain) < len(escaped) <= CAMPAIGN_BODY_MAX_BYTES
    assert 1.1 * len(escaped) > CAMPAIGN_BODY_MAX_BYTES  # the bound is tight, not 16 MiB
