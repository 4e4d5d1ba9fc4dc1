"""The device registry on the MongoDB wire server: upsert by token, retire tokens, stream audiences."""

from __future__ import annotations

import asyncio

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.service_layer.ports import Stores
from tests.factories import EVERYONE, device


async def test_upsert_inserts_new_tokens_and_updates_known_ones(stores: Stores) -> None:
    first = await stores.devices.upsert([device(i) for i in range(100)], utcnow())
    second = await stores.devices.upsert(
        [device(i, platform="ios") for i in range(50, 150)], utcnow())
    assert (first.created, first.updated) == (100, 0)
    assert (second.created, second.updated) == (50, 50)
    updated = await stores.devices.find_by_token("tok-00075")
    untouched = await stores.devices.find_by_token("tok-00010")
    assert updated is not None and updated.platform == "ios"
    assert untouched is not None and untouched.platform == "android"


async def test_repeated_token_in_one_request_keeps_the_last_entry(stores: Stores) -> None:
    counts = await stores.devices.upsert([device(1, locale="en"), device(1, locale="ko")], utcnow())
    stored = await stores.devices.find_by_token("tok-00001")
    assert (counts.created, counts.updated) == (1, 0)
    assert stored is not None and stored.locale == "ko"


async def test_concurrent_upserts_of_the_same_tokens_never_duplicate(stores: Stores) -> None:
    batch = [device(i) for i in range(300)]
    results = await asyncio.gather(*(stores.devices.upsert(batch, utcnow()) for _ in range(4)))
    assert sum(r.created for r in results) == 300
    assert sum(r.created + r.updated for r in results) == 4 * 300
    streamed = [d async for d in stores.devices.stream(EVERYONE, None, None)]
    assert len(streamed) == 300


async def test_retired_tokens_leave_every_audience(stores: Stores) -> None:
    await stores.devices.upsert([device(i) for i in range(100)], utcnow())
    few = await stores.devices.mark_invalid(["tok-00003", "tok-00004"], "UNREGISTERED", utcnow())
    many = await stores.devices.mark_invalid([f"tok-{i:05d}" for i in range(50, 90)],
                                             "INVALID_ARGUMENT", utcnow())
    again = await stores.devices.mark_invalid(["tok-00003"], "UNREGISTERED", utcnow())
    audience = [r.token async for _, r in
                stores.devices.stream(Audience(), None, None)]
    assert (few, many, again) == (2, 40, 0)
    assert len(audience) == 58
    assert "tok-00003" not in audience and "tok-00060" not in audience
    retired = await stores.devices.find_by_token("tok-00060")
    assert retired is not None and retired.invalid_reason == "INVALID_ARGUMENT"


async def test_upsert_does_not_revive_a_retired_token(stores: Stores) -> None:
    await stores.devices.upsert([device(1)], utcnow())
    await stores.devices.mark_invalid(["tok-00001"], "UNREGISTERED", utcnow())
    await stores.devices.upsert([device(1, locale="fr")], utcnow())
    stored = await stores.devices.find_by_token("tok-00001")
    assert stored is not None
    assert stored.invalid is True
    assert stored.locale == "fr"


async def test_stream_pages_by_id_range_in_order(stores: Stores) -> None:
    await stores.devices.upsert([device(i, push_enabled=i % 2 == 0) for i in range(40)],
                                utcnow())
    query = Audience(push_enabled=True)
    everyone = [d async for d in stores.devices.stream(query, None, None)]
    after, until = everyone[4][0], everyone[14][0]
    middle = [d async for d in stores.devices.stream(query, after, until)]
    assert [i for i, _ in everyone] == sorted(i for i, _ in everyone)
    assert len(everyone) == 20
    assert [r.token for _, r in middle] == [r.token for _, r in everyone[5:15]]


async def test_audience_filters_select_the_right_devices(stores: Stores) -> None:
    await stores.devices.upsert([
        device(1, platform="ios", topics=["news"], attributes={"birth_year": 1985, "gender": "f"}),
        device(2, platform="android", topics=["sports"], attributes={"birth_year": 1995}),
        device(3, platform="web", topics=["news", "live"], marketing_enabled=True,
               attributes={"birth_year": 1975, "gender": "m"}),
        device(4, push_enabled=False, topics=["news"]),
    ], utcnow())

    async def tokens(**filters: object) -> set[str]:
        query = Audience.model_validate(filters)
        return {r.token[-1] async for _, r in stores.devices.stream(query, None, None)}

    assert await tokens() == {"1", "2", "3"}
    assert await tokens(push_enabled=None) == {"1", "2", "3", "4"}
    assert await tokens(topics=["news"]) == {"1", "3"}
    assert await tokens(platforms=["ios", "web"]) == {"1", "3"}
    assert await tokens(marketing_enabled=True) == {"3"}
    assert await tokens(user_ids=["u2", "u4"]) == {"2"}
    assert await tokens(attributes={"birth_year": {"gte": 1980, "lt": 1990}}) == {"1"}
    assert await tokens(attributes={"gender": {"in": ["m", "x"]}}) == {"3"}
    assert await tokens(attributes={"gender": {"eq": "f"}}, topics=["news"]) == {"1"}
