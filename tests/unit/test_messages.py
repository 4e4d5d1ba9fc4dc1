"""RabbitMQ message contracts (herald/domain/messages.py).

``CancelCampaign`` is public: other teams publish it with their own tools, so it must accept the
documented fields, tolerate fields it does not know, and refuse anything it cannot act on.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from pydantic import ValidationError

from herald.domain.documents import new_campaign_id
from herald.domain.messages import CancelCampaign, DispatchCampaign, Recipient, SendChunk

CAMPAIGN_ID = "65f1c2a9e4b0a1b2c3d4e5f6"


# --- CancelCampaign --------------------------------------------------------------------------------
def test_cancel_accepts_the_public_contract() -> None:
    wire = json.dumps({"campaign_id": CAMPAIGN_ID, "reason": "wrong audience",
                       "requested_by": "ops@example.com"})
    message = CancelCampaign.model_validate_json(wire)
    assert message.campaign_id == CAMPAIGN_ID
    assert message.reason == "wrong audience"
    assert message.requested_by == "ops@example.com"
    assert message.version == 1


def test_cancel_needs_only_the_campaign_id() -> None:
    message = CancelCampaign.model_validate_json(json.dumps({"campaign_id": CAMPAIGN_ID}))
    assert (message.reason, message.requested_by, message.version) == (None, None, 1)


def test_cancel_with_explicit_version_1() -> None:
    wire = json.dumps({"campaign_id": CAMPAIGN_ID, "version": 1})
    assert CancelCampaign.model_validate_json(wire).version == 1


def test_cancel_ignores_unknown_fields_from_newer_publishers() -> None:
    wire = json.dumps({"campaign_id": CAMPAIGN_ID, "reason": "r", "priority": "urgent",
                       "trace": {"id": "abc"}, "tags": ["x"]})
    message = CancelCampaign.model_validate_json(wire)
    assert message.campaign_id == CAMPAIGN_ID
    assert not hasattr(message, "priority")
    assert "priority" not in message.model_dump()


@pytest.mark.parametrize(
    "campaign_id",
    ["", "65f1c2a9e4b0a1b2c3d4e5f", "65f1c2a9e4b0a1b2c3d4e5f6a", "65F1C2A9E4B0A1B2C3D4E5F6",
     "65f1c2a9e4b0a1b2c3d4e5fg", " 65f1c2a9e4b0a1b2c3d4e5f6", "65f1c2a9e4b0a1b2c3d4e5f6\n",
     "ObjectId('65f1c2a9e4b0a1b2c3d4e5f6')", "{\"$ne\": null}"],
)
def test_cancel_rejects_malformed_campaign_ids(campaign_id: str) -> None:
    with pytest.raises(ValidationError):
        CancelCampaign.model_validate_json(json.dumps({"campaign_id": campaign_id}))


@pytest.mark.parametrize("campaign_id", [None, 123, {"$oid": CAMPAIGN_ID}, [CAMPAIGN_ID]])
def test_cancel_rejects_non_string_campaign_ids(campaign_id: Any) -> None:
    with pytest.raises(ValidationError):
        CancelCampaign.model_validate_json(json.dumps({"campaign_id": campaign_id}))


def test_cancel_without_campaign_id_is_rejected() -> None:
    with pytest.raises(ValidationError):
        CancelCampaign.model_validate_json(json.dumps({"reason": "stop", "requested_by": "ops"}))


@pytest.mark.parametrize("version", [0, 2, 99, "2", None])
def test_cancel_with_another_version_is_rejected(version: Any) -> None:
    wire = json.dumps({"campaign_id": CAMPAIGN_ID, "version": version})
    with pytest.raises(ValidationError):
        CancelCampaign.model_validate_json(wire)


def test_cancel_reason_up_to_500_characters() -> None:
    assert CancelCampaign(campaign_id=CAMPAIGN_ID, reason="r" * 500).reason == "r" * 500
    with pytest.raises(ValidationError):
        CancelCampaign(campaign_id=CAMPAIGN_ID, reason="r" * 501)


def test_cancel_requested_by_up_to_200_characters() -> None:
    CancelCampaign(campaign_id=CAMPAIGN_ID, requested_by="o" * 200)
    with pytest.raises(ValidationError):
        CancelCampaign(campaign_id=CAMPAIGN_ID, requested_by="o" * 201)


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b"null", b'"65f1c2a9e4b0a1b2c3d4e5f6"'])
def test_cancel_rejects_bodies_that_are_not_an_object(body: bytes) -> None:
    with pytest.raises(ValidationError):
        CancelCampaign.model_validate_json(body)


def test_cancel_round_trips_through_json() -> None:
    message = CancelCampaign(campaign_id=CAMPAIGN_ID, reason="r", requested_by="me")
    assert CancelCampaign.model_validate_json(message.model_dump_json()) == message


# --- DispatchCampaign ------------------------------------------------------------------------------
def test_dispatch_carries_only_a_campaign_id() -> None:
    assert DispatchCampaign.model_validate({"campaign_id": CAMPAIGN_ID}).campaign_id == CAMPAIGN_ID
    with pytest.raises(ValidationError):
        DispatchCampaign.model_validate({"campaign_id": CAMPAIGN_ID, "extra": 1})
    with pytest.raises(ValidationError):
        DispatchCampaign.model_validate({"campaign_id": "nope"})


# --- SendChunk -------------------------------------------------------------------------------------
def chunk(**fields: Any) -> dict[str, Any]:
    return {"campaign_id": CAMPAIGN_ID, "seq": 0, "recipients": [{"token": "t1"}], **fields}


def test_send_chunk_accepts_a_valid_chunk() -> None:
    message = SendChunk.model_validate(chunk(seq=7, recipients=[{"token": "t1", "user_id": "u1"},
                                                                {"token": "t2"}]))
    assert message.seq == 7
    assert message.recipients == [Recipient(token="t1", user_id="u1"), Recipient(token="t2")]


def test_send_chunk_seq_starts_at_zero() -> None:
    assert SendChunk.model_validate(chunk(seq=0)).seq == 0
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(seq=-1))


def test_send_chunk_needs_at_least_one_recipient() -> None:
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(recipients=[]))


def test_send_chunk_holds_at_most_ten_thousand_recipients() -> None:
    many = [{"token": f"t{i}"} for i in range(10_000)]
    assert len(SendChunk.model_validate(chunk(recipients=many)).recipients) == 10_000
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(recipients=[*many, {"token": "one-more"}]))


def test_send_chunk_forbids_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(priority="high"))
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(recipients=[{"token": "t", "platform": "ios"}]))


@pytest.mark.parametrize("token", ["", "x" * 4097])
def test_recipient_tokens_in_a_chunk_are_bounded(token: str) -> None:
    # Their alphabet was checked when the device registered (DeviceIn); a chunk carries
    # hundreds of them on the sender's hot path, so only their size is checked again here.
    with pytest.raises(ValidationError):
        Recipient(token=token)


def test_recipient_token_of_4096_characters_is_accepted() -> None:
    assert Recipient(token="x" * 4096).token == "x" * 4096


def test_send_chunk_rejects_a_malformed_campaign_id() -> None:
    with pytest.raises(ValidationError):
        SendChunk.model_validate(chunk(campaign_id="65f1c2a9e4b0a1b2c3d4e5f"))


def test_messages_are_immutable() -> None:
    message = SendChunk.model_validate(chunk())
    with pytest.raises(ValidationError):
        message.seq = 1  # type: ignore[misc]


@pytest.mark.parametrize("reason", ["stop\x00it", "line\nbreak", "evil\u202etxt.exe", "mark\u200f",
                                    "isolate\u2066x\u2069", "c1\x85"])
def test_a_reason_or_a_name_with_control_or_bidi_characters_is_refused(reason: str) -> None:
    """Issue 31: what a publisher writes is read in logs, the console and CSV cells as written."""
    with pytest.raises(ValidationError, match="plain printable text"):
        CancelCampaign(campaign_id="6b0137d0eaff6ead39685496", reason=reason)
    with pytest.raises(ValidationError, match="plain printable text"):
        CancelCampaign(campaign_id="6b0137d0eaff6ead39685496", requested_by=reason)


@pytest.mark.parametrize("reason", ["broken link", "Lien cassé — désolé", "リンク切れ", "🔥 hot"])
def test_plain_text_in_any_script_is_accepted(reason: str) -> None:
    assert CancelCampaign(campaign_id="6b0137d0eaff6ead39685496", reason=reason).reason == reason


def test_campaign_ids_tell_nothing_of_each_other() -> None:
    """Issue 31: the cancel credential sees a campaign id; the ids made around it are not
    guessable from it (48 random bits after the second and the process's sequence), and the
    ids of one process still sort in creation order."""
    ids = [new_campaign_id() for _ in range(1_000)]
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in ids)
    tails = [int(i[12:], 16) for i in ids]
    assert len({b - a for a, b in itertools.pairwise(tails)}) > 990
    assert sorted(ids) == ids or any(i[8:12] == "0000" for i in ids[1:])  # the sequence wraps
