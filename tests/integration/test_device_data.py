"""Device data follows the role table (issue 31, point 4), on the in-process api with real stores
behind it: a viewer or a responder cannot learn a device's attributes, locale or token. Their
estimates may not single out devices (user_ids, attributes, topics); their audits mask tokens;
a preview (an operator's) never shows a retired device and masks every token; docs/access.md's
route table is the code's."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from fastapi import FastAPI

from herald.clock import utcnow
from herald.domain.access import Role
from herald.service_layer.ports import Stores
from services.api import route_table
from tests.factories import device, paged_campaign
from tests.integration.helpers import client_of, mint
from tests.support import error_code

DOCS = Path(__file__).resolve().parents[2] / "docs" / "access.md"
SINGLING_OUT = [
    {"user_ids": ["u1"]},
    {"attributes": {"email": {"gte": "a", "lt": "m"}}},
    {"attributes": {"plan": {"eq": "gold"}}},
    {"topics": ["user-u1"]},
]
FLEET_WIDE = [{}, {"platforms": ["android"]}, {"locales": ["es"], "push_enabled": None},
              {"marketing_enabled": True}]


async def _registered(stores: Stores) -> None:
    await stores.devices.upsert([
        device(1, locale="es-MX", topics=["user-u1"], marketing_enabled=True,  # estimates are
               attributes={"email": "ann@example.com", "plan": "gold"}),  # marketing
        device(2, locale="fr", marketing_enabled=True)], utcnow())


@pytest.mark.parametrize("role", [Role.VIEWER, Role.RESPONDER])
@pytest.mark.parametrize("audience", SINGLING_OUT)
async def test_a_viewers_or_responders_estimate_may_not_single_out_devices(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores, role: Role,
        audience: dict[str, object]) -> None:
    await _registered(stores)
    async with client_of(api_app, await mint(api, role)) as client:
        refused = await client.post("/v1/audiences/estimate",
                                    json={"audience": audience, "languages": ["es"]})
    assert (refused.status_code, error_code(refused)) == (403, "forbidden")
    assert "devices:read" in refused.json()["error"]["message"]
    assert "devices" not in refused.json()["error"]  # no count, however small


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ADMIN])
@pytest.mark.parametrize("audience", SINGLING_OUT)
async def test_an_operator_or_admin_may_count_by_user_attribute_and_topic(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores, role: Role,
        audience: dict[str, object]) -> None:
    await _registered(stores)
    async with client_of(api_app, await mint(api, role)) as client:
        answer = await client.post("/v1/audiences/estimate", json={"audience": audience})
    assert answer.status_code == 200, answer.text
    assert answer.json()["devices"] == 1


@pytest.mark.parametrize("audience", FLEET_WIDE)
async def test_a_viewer_counts_the_fleet_by_consent_platform_and_locale(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores,
        audience: dict[str, object]) -> None:
    await _registered(stores)
    async with client_of(api_app, await mint(api, Role.VIEWER)) as client:
        answer = await client.post("/v1/audiences/estimate",
                                   json={"audience": audience, "languages": ["es"]})
    assert answer.status_code == 200, answer.text


async def test_the_red_teams_oracle_is_refused_at_its_first_question(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores) -> None:
    """A viewer read one user's e-mail in 130 counts by narrowing a range; now the first
    count is refused, and so is every other way to name the user."""
    await _registered(stores)
    async with client_of(api_app, await mint(api, Role.VIEWER, "curious")) as viewer:
        answers = [await viewer.post("/v1/audiences/estimate", json={"audience": {
            "user_ids": ["u1"], "attributes": {"email": {"gte": low, "lt": high}}}})
            for low, high in [("a", "n"), ("a", "g"), ("a", "d")]]
    assert {answer.status_code for answer in answers} == {403}


@pytest.mark.parametrize(("role", "full"), [(Role.VIEWER, False), (Role.RESPONDER, False),
                                            (Role.OPERATOR, True), (Role.ADMIN, True)])
async def test_the_audit_masks_tokens_for_a_key_without_devices_read(
        api: httpx.AsyncClient, api_app: FastAPI, stores: Stores, role: Role,
        full: bool) -> None:
    campaign_id = await paged_campaign(stores)
    async with client_of(api_app, await mint(api, role)) as client:
        ndjson = await client.get(f"/v1/campaigns/{campaign_id}/recipients",
                                  params={"outcome": "sent"})
        csv = await client.get(f"/v1/campaigns/{campaign_id}/recipients",
                               params={"outcome": "unsent", "format": "csv"})
    tokens = [orjson.loads(line)["token"] for line in ndjson.content.splitlines()]
    unsent = [row.split(",")[0] for row in csv.text.splitlines()[1:]]
    if full:
        assert tokens[:2] == ["tok-00000", "tok-00001"] and unsent[0] == "tok-00013"
    else:
        assert tokens[:2] == ["…0000", "…0001"] and unsent[0] == "…0013"
        assert not any(token.startswith("tok-") for token in tokens + unsent)


async def test_a_preview_masks_the_token_and_never_shows_a_retired_device(
        api: httpx.AsyncClient, stores: Stores) -> None:
    await stores.devices.upsert([device(i, user_id="ann", locale="es") for i in range(2)],
                                utcnow())
    content = {"title": "Hi {{ locale | default('') }}", "body": "b"}
    newest = (await api.post("/v1/campaigns/preview", json={"content": content,
                                                             "user_id": "ann"})).json()
    assert newest["device"]["token"] == newest["message"]["token"] == "…0001"
    assert newest["message"]["notification"]["title"] == "Hi es"
    await stores.devices.mark_invalid(["tok-00001"], "UNREGISTERED", utcnow())
    by_user = (await api.post("/v1/campaigns/preview", json={"content": content,
                                                              "user_id": "ann"})).json()
    assert by_user["device"]["token"] == "…0000"  # the newest one a campaign reaches
    retired = await api.post("/v1/campaigns/preview", json={"content": content,
                                                             "token": "tok-00001"})
    assert (retired.status_code, error_code(retired)) == (404, "device_not_found")
    assert "retired" in retired.json()["error"]["message"]


async def test_docs_access_md_lists_every_route_with_its_scope_as_the_code_declares(
        api_app: FastAPI) -> None:
    """Regenerate with ``python -m services.api.route_table`` and paste it in."""
    assert route_table.documented(DOCS.read_text()) == route_table.markdown(api_app)
