"""``POST /v1/devices/import`` in this process, on the MongoDB wire server (issue 33, point 5): a
file imported twice changes nothing the second time and says so; invalid lines are reported by
number while the rest are imported; a line too long, a body over the limit and a body that is
not NDJSON are refused with clear JSON errors; only keys that may write devices import."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from herald import names
from herald.adapters.mongo import Database
from herald.contracts.device_lines import MAX_LINE_BYTES, NDJSON_MEDIA_TYPE
from herald.domain.access import Role
from herald.settings import Settings
from services.api.app import create_app
from tests.integration.helpers import client_of, mint
from tests.support import error_code

NDJSON = {"Content-Type": NDJSON_MEDIA_TYPE}
SMALL_LIMIT = 20_000


def device(i: int, **fields: Any) -> dict[str, Any]:
    return {"token": f"imp-{i:06d}", "platform": "android", "user_id": f"u{i}", **fields}


def ndjson(devices: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in devices)


async def post_import(api: httpx.AsyncClient, body: bytes) -> httpx.Response:
    return await api.post("/v1/devices/import", content=body, headers=NDJSON)


async def test_a_file_imported_twice_changes_nothing_the_second_time(
        api: httpx.AsyncClient, db: Database) -> None:
    devices = [device(i, attributes={"n": i, "ratio": i / 4, "vip": i % 3 == 0},
                      topics=["news"] if i % 2 else [], locale="pt_BR" if i % 5 else None)
               for i in range(6_000)]  # three batches of the use case (IMPORT_BATCH)
    body = ndjson(devices)
    first = await post_import(api, body)
    assert first.status_code == 200, first.text
    assert first.json() == {"lines": 6_000, "inserted": 6_000, "updated": 0, "unchanged": 0,
                            "invalid": 0, "problems": [], "problems_omitted": 0}
    stamps = {d["token"]: d["updated_at"] async for d in db[names.DEVICES].find({})}

    again = await post_import(api, body)
    assert again.json() == {"lines": 6_000, "inserted": 0, "updated": 0, "unchanged": 6_000,
                            "invalid": 0, "problems": [], "problems_omitted": 0}
    assert await db[names.DEVICES].count_documents({}) == 6_000
    assert {d["token"]: d["updated_at"] async for d in db[names.DEVICES].find({})} == stamps

    devices[7]["locale"], devices[5_997]["attributes"]["vip"] = "ko", False  # was True
    changed = await post_import(api, ndjson([*devices, device(20_000)]))
    assert changed.json()["inserted"] == 1
    assert (changed.json()["updated"], changed.json()["unchanged"]) == (2, 5_998)
    stored = await db[names.DEVICES].find_one({"token": devices[7]["token"]})
    assert stored is not None and stored["locale"] == "ko"


async def test_invalid_lines_are_reported_by_number_and_the_others_imported(
        api: httpx.AsyncClient, db: Database) -> None:
    lines = [orjson.dumps(device(i)) for i in range(10)]
    lines[2] = b'{"token": "imp-2", "platform": "symbian"}'
    lines[6] = b'{"token": "imp-6", "platform": "ios"'  # cut short
    lines.insert(4, b"")  # a blank line still has its number
    response = await post_import(api, b"\n".join(lines))
    answer = response.json()
    assert response.status_code == 200
    assert (answer["lines"], answer["inserted"], answer["invalid"]) == (10, 8, 2)
    assert [(p["line"], p["code"]) for p in answer["problems"]] == [
        (3, "invalid_device"), (8, "invalid_device")]
    assert answer["problems"][0]["message"].startswith("platform: Input should be")
    assert await db[names.DEVICES].count_documents({}) == 8
    assert await db[names.DEVICES].find_one({"token": "imp-2"}) is None


async def test_a_line_too_long_is_refused_by_number_with_a_clear_error(
        api: httpx.AsyncClient, db: Database) -> None:
    huge = orjson.dumps(device(1, attributes={f"a{i}": "x" * 1024 for i in range(600)}))
    assert len(huge) > MAX_LINE_BYTES
    response = await post_import(api, ndjson([device(0)]) + huge + b"\n" + ndjson([device(2)]))
    answer = response.json()
    assert (response.status_code, answer["inserted"], answer["invalid"]) == (200, 2, 1)
    (problem,) = answer["problems"]
    assert (problem["line"], problem["code"]) == (2, "line_too_long")
    assert problem["message"] == (f"{len(huge):,} bytes, over the {MAX_LINE_BYTES:,} a device "
                                  "line may have (is the body NDJSON, one device per line?)")
    assert await db[names.DEVICES].count_documents({}) == 2


async def test_a_body_that_is_not_ndjson_is_refused_415_and_changes_nothing(
        api: httpx.AsyncClient, db: Database) -> None:
    body = ndjson([device(1)])
    for headers in ({"Content-Type": "application/json"}, {}):
        response = await api.post("/v1/devices/import", content=body, headers=headers)
        assert (response.status_code, error_code(response)) == (415, "unsupported_media_type")
    assert "application/x-ndjson" in response.json()["error"]["message"]
    assert await db[names.DEVICES].count_documents({}) == 0


@pytest.fixture
async def small_app(broker_settings: Settings, db: Database, redis: Any,
                    admin_key: str) -> AsyncIterator[FastAPI]:
    """An api that takes imports of at most ``SMALL_LIMIT`` bytes."""
    app = create_app(broker_settings.model_copy(update={
        "bootstrap_api_key": SecretStr(admin_key), "api_max_import_bytes": SMALL_LIMIT}))
    async with app.router.lifespan_context(app):
        yield app


async def test_a_body_over_the_import_limit_is_413_json(small_app: FastAPI, admin_key: str,
                                                        db: Database) -> None:
    body = ndjson([device(i) for i in range(1_000)])
    assert len(body) > SMALL_LIMIT

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start:start + 4096]

    async with client_of(small_app, admin_key) as api:
        declared = await post_import(api, body)
        assert (declared.status_code, error_code(declared)) == (413, "request_too_large")
        assert f"limited to {SMALL_LIMIT} bytes" in declared.json()["error"]["message"]
        assert await db[names.DEVICES].count_documents({}) == 0  # refused before a byte
        cut = await api.post("/v1/devices/import", content=chunked(), headers=NDJSON)
        assert (cut.status_code, error_code(cut)) == (413, "request_too_large")
        paths = (await api.get("/openapi.json")).json()["paths"]
    operation = paths["/v1/devices/import"]["post"]
    assert operation["x-herald-max-body-bytes"] == SMALL_LIMIT
    assert operation["x-herald-scope"] == "devices:write"
    assert set(operation["requestBody"]["content"]) == {NDJSON_MEDIA_TYPE}


async def test_only_keys_that_write_devices_import(api: httpx.AsyncClient, api_app: FastAPI,
                                                   db: Database) -> None:
    body = ndjson([device(1)])
    for role, status in ((Role.VIEWER, 403), (Role.OPERATOR, 403), (Role.INGEST, 200)):
        async with client_of(api_app, await mint(api, role)) as caller:
            response = await post_import(caller, body)
        assert response.status_code == status, (role, response.text)
        if status == 403:
            assert error_code(response) == "forbidden"
            assert await db[names.DEVICES].count_documents({}) == 0
    assert await db[names.DEVICES].count_documents({}) == 1
