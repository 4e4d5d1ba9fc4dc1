"""Every string a device or a campaign carries has a bound that fits its meaning, and the
largest campaign a body can hold is a number the api can refuse bodies by (issue 31):
``herald/domain/types.py``, ``herald/domain/audience.py``, ``herald/domain/payload.py``,
``herald/contracts/sizes.py``."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from herald.contracts.http import CampaignCreate, DeviceIn, ScheduleCreate
from herald.contracts.sizes import CAMPAIGN_BODY_MAX_BYTES
from herald.domain.payload import (
    PayloadTooLarge,
)
from herald.domain.types import (
    MAX_ATTRIBUTE_TEXT_CHARS,
    MAX_TOPIC_CHARS,
    MAX_USER_ID_CHARS,
)
from tests.factories import largest_campaign

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
    with pytest.raises(ValidationError, match="at most 120 characters"):
        ScheduleCreate.model_validate({"template": {"title": "t", "body": "b"},
                                       "cron": "0 " * 61, "timezone": "UTC"})


def test_an_image_link_is_at_most_2083_characters() -> None:
    with pytest.raises(ValidationError, match="at most 2083 characters"):
        CampaignCreate.model_validate({"title": "t", "body": "b",
                                       "image_url": "https://x.example/" + "a" * 2100})


# --- the largest campaign --------------------------------------------------------------------------
@pytest.mark.parametrize("placeholders", [False, True])
def test_the_largest_campaign_is_valid_and_fits_the_bound_however_it_is_written(
        placeholders: bool) -> None:
    campaign = largest_campaign(placeholders=placeholders)
    CampaignCreate.model_validate(campaign)  # valid: every limit reached, none passed
    escaped = json.dumps(campaign).encode()  # Python's default: \\uXXXX, ", " and ": "
    plain = orjson.dumps(campaign)
    print(f"\nthe largest campaign: {len(escaped):,} bytes escaped, {len(plain):,} as UTF-8; "
          f"the bound {CAMPAIGN_BODY_MAX_BYTES:,}")
    assert len(plain) < len(escaped) <= CAMPAIGN_BODY_MAX_BYTES
    if not placeholders:  # the bound is tight, not 16 MiB
        assert 1.1 * len(escaped) > CAMPAIGN_BODY_MAX_BYTES
