"""``replace_key`` through the HTTP API (real MongoDB wire server, RabbitMQ and Redis behind it):
stored as named, or None for the key derived from the campaign id; refused with a clear 422."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from bson import ObjectId

from herald.adapters.mongo import Database
from herald.clock import utcnow
from tests.factories import CAMPAIGN_BODY as CAMPAIGN


async def stored(db: Database, campaign_id: str) -> dict[str, Any]:
    document = await db["campaigns"].find_one({"_id": ObjectId(campaign_id)})
    assert document is not None
    return document


@pytest.mark.parametrize("named", ["promo:2026.11", "x" * 64])
async def test_a_named_key_is_stored_on_the_campaign(api: httpx.AsyncClient, db: Database,
                                                    named: str) -> None:
    created = await api.post("/v1/campaigns", json={**CAMPAIGN, "replace_key": named})
    assert created.status_code == 202
    assert (await stored(db, created.json()["id"]))["replace_key"] == named


async def test_without_a_key_none_is_stored(api: httpx.AsyncClient, db: Database) -> None:
    created = await api.post("/v1/campaigns", json=CAMPAIGN)
    assert created.status_code == 202
    assert (await stored(db, created.json()["id"]))["replace_key"] is None


@pytest.mark.parametrize("bad", ["", "x" * 65, "a/b", "with space", "é", 42])
async def test_a_bad_key_is_a_422_that_says_what_is_allowed(api: httpx.AsyncClient, db: Database,
                                                            bad: object) -> None:
    response = await api.post("/v1/campaigns", json={**CAMPAIGN, "replace_key": bad})
    error = response.json()["error"]
    assert response.status_code == 422 and error["code"] == "validation_error"
    assert error["details"][0]["loc"] == ["body", "replace_key"]
    if isinstance(bad, str):
        assert "1 to 64 characters" in error["message"]
        assert "ASCII letter, a digit, '_', '-', '.' or ':'" in error["message"]
    assert await db["campaigns"].count_documents({}) == 0


async def test_content_too_big_with_the_named_key_is_a_payload_too_large(
        api: httpx.AsyncClient, db: Database) -> None:
    fits_with_default_key = {**CAMPAIGN, "body": "b" * 3690}
    refused = await api.post("/v1/campaigns",
                             json={**fits_with_default_key, "replace_key": "k" * 64})
    accepted = await api.post("/v1/campaigns", json=fits_with_default_key)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "payload_too_large"
    assert accepted.status_code == 202
    assert await db["campaigns"].count_documents({}) == 1


async def test_editing_a_scheduled_campaign_counts_the_key_it_will_be_sent_with(
        api: httpx.AsyncClient, db: Database) -> None:
    """Content that would fit with the derived key is too big with the campaign's own, longer one."""
    send_at = (utcnow() + timedelta(hours=2)).isoformat()
    named = await api.post("/v1/campaigns",
                           json={**CAMPAIGN, "send_at": send_at, "replace_key": "k" * 64})
    derived = await api.post("/v1/campaigns", json={**CAMPAIGN, "send_at": send_at})
    refused = await api.patch(f"/v1/campaigns/{named.json()['id']}", json={"body": "b" * 3690})
    accepted = await api.patch(f"/v1/campaigns/{derived.json()['id']}", json={"body": "b" * 3690})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "payload_too_large"
    assert accepted.status_code == 200
    assert (await stored(db, named.json()["id"]))["content"]["body"] == CAMPAIGN["body"]
