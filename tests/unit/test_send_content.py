"""Issue 25 on the send path, with the fakes: what the dispatcher copies of each device into a
chunk (nothing more for a plain campaign), and what the sender makes of each recipient."""

from __future__ import annotations

from typing import Any

import orjson

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.domain.documents import CampaignContent
from herald.domain.messages import Profile, ProfileNeed, Recipient, SendChunk
from herald.domain.payload import MessageTemplate, build_payload
from herald.domain.rendering import MESSAGE_TOO_BIG, Translation, compile_content
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import AudienceSource, Variants
from herald.service_layer.sending.chunk import targets
from tests.factories import device

KEY = "herald-000000000000000000000001"
PERSONAL = CampaignContent(title='Hi {{ attributes.first_name | default("there") }}', body="b")
TRANSLATED = CampaignContent(title="Hi", body="b",
                             translations={"es": Translation(title="Hola", body="b")})


async def _streamed(stores: Stores, content: CampaignContent) -> list[Recipient]:
    await stores.devices.upsert([
        device(1, locale="es-MX", attributes={"first_name": "Ana", "plan": "gold"}),
        device(2, platform="ios")], utcnow())
    source = AudienceSource(stores, Audience(), None, content.profile_need)
    return [recipient async for _, recipient in source.stream(after=None)]


async def test_a_plain_campaigns_recipients_carry_only_token_and_user_id(stores: Stores) -> None:
    streamed = await _streamed(stores, CampaignContent(title="Hi", body="b"))
    assert [r.stored() for r in streamed] == [{"token": "tok-00001", "user_id": "u1"},
                                              {"token": "tok-00002", "user_id": "u2"}]


async def test_a_personal_campaigns_recipients_carry_the_attributes_it_reads_and_no_more(
        stores: Stores) -> None:
    streamed = await _streamed(stores, PERSONAL)
    assert streamed[0].profile == Profile(platform="android", locale="es-MX",
                                          attributes={"first_name": "Ana"})
    assert streamed[1].profile == Profile(platform="ios")


async def test_a_translated_campaigns_recipients_carry_their_locale(stores: Stores) -> None:
    assert TRANSLATED.profile_need == ProfileNeed()
    streamed = await _streamed(stores, TRANSLATED)
    assert [r.profile.locale if r.profile else "-" for r in streamed] == ["es-MX", None]
    variants = Variants(TRANSLATED.translations)
    assert [variants.of(r) for r in streamed] == ["es", "default"]


def _chunk(*profiles: dict[str, Any] | None) -> SendChunk:
    return SendChunk(campaign_id="0" * 24, seq=0, recipients=[
        Recipient(token=f"tok-{i}", user_id=f"u{i}",
                  profile=None if p is None else Profile.model_validate(p))
        for i, p in enumerate(profiles)])


def _compiled(content: CampaignContent) -> Any:
    return compile_content(content.title, content.body, content.data, content.translations,
                           replace_key=KEY)


def test_a_plain_campaign_shares_one_message_and_renders_nothing() -> None:
    content = _compiled(CampaignContent(title="Hi", body="b"))
    todo, refused = targets(_chunk(None, None), {1: None}, content)
    assert ([(t.position, t.body) for t in todo], refused) == ([(0, None)], [])
    shared = MessageTemplate(build_payload("Hi", "b", {}, replace_key=KEY))
    assert content.shared.body_for("tok-0") == shared.body_for("tok-0")


def test_each_recipient_gets_its_own_body_and_one_too_big_fails_alone() -> None:
    content = _compiled(PERSONAL)
    todo, refused = targets(_chunk({"platform": "android", "attributes": {"first_name": "Ana"}},
                                   {"platform": "android", "attributes": {"first_name": "A" * 4000}},
                                   None), {}, content)
    assert [(t.position, orjson.loads(t.body.at(0.0) if t.body else b"")["message"]
             ["notification"]["title"]) for t in todo] == [(0, "Hi Ana"), (2, "Hi there")]
    assert [(o.position, o.code) for o in refused] == [(1, MESSAGE_TOO_BIG)]
    assert content.shared is None
