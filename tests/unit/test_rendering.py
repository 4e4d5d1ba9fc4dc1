"""The message each device gets (herald/domain/rendering.py): the translation its locale picks,
its placeholders filled in, the FCM request body (byte for byte what ``MessageTemplate`` makes of
``build_payload`` with the same words, and valid by Google's discovery document), FCM's size
rule per rendered message, and the problems a campaign is refused for at creation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from fcm_emulator.discovery import Validator
from herald.domain import rendering
from herald.domain.payload import (
    MAX_PAYLOAD_BYTES,
    SIZED_NOW_S,
    ClickActions,
    MessageTemplate,
    SendOptions,
    build_payload,
    payload_size,
)
from herald.domain.personalize import Position, TemplateProblem, TemplateRefused
from herald.domain.rendering import (
    CompiledContent,
    DeviceMessage,
    Translation,
    Translations,
    compile_content,
    content_problems,
    size_problem,
)

KEY = "herald-6b0137d0eaff6ead39685496"
NOW_S = 1_795_500_000.0
OPTIONS = SendOptions(ttl_s=3600, priority="high", sound="default",
                      click=ClickActions(web="https://example.com/live"), analytics_label="live")
IMAGE = "https://example.com/live.png"
TITLE = 'Hi {{ attributes.first_name | default("there") }}'
BODY = "The stream starts now on {{ platform }}"
DATA = {"landingUrl": "https://example.com/live?u={{ user_id | default('') | urlencode }}",
        "kind": "live"}
TRANSLATIONS = {
    "es": Translation(title='Hola {{ attributes.first_name | default("") }}',
                      body="La transmisión empieza en {{ platform }}", data={"kind": "en vivo"}),
    "pt-BR": Translation(title="Olá", body="A transmissão começou"),
}


@dataclass(frozen=True)
class Device:
    platform: str = "android"
    user_id: str | None = "u 42"
    locale: str | None = None
    timezone: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


class Untouchable:
    """A device any of whose fields but the locale fails the test if read."""

    locale = "pt-BR"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the device's {name} was read")


def compiled(title: str = TITLE, body: str = BODY, data: dict[str, str] | None = None,
             translations: dict[str, Translation] | None = None, **kwargs: Any) -> CompiledContent:
    return compile_content(title, body, DATA if data is None else data,
                           TRANSLATIONS if translations is None else translations,
                           image_url=kwargs.get("image_url", IMAGE),
                           options=kwargs.get("options", OPTIONS), replace_key=KEY)


def expected_body(token: str, title: str, body: str, data: dict[str, str],
                  image_url: str | None = IMAGE, options: SendOptions | None = OPTIONS) -> bytes:
    """What the sender sends today for these words: MessageTemplate over build_payload."""
    return MessageTemplate(build_payload(title, body, data, image_url, replace_key=KEY,
                                         options=options, now_s=NOW_S)).body_for(token)


def sent_at_now(message: DeviceMessage) -> bytes | None:
    """The request a message makes when it is sent at NOW_S."""
    return None if message.body is None else message.body.at(NOW_S)


# --- which variant ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("locale", "variant"),
    [("es-MX", "es"), ("es", "es"), ("ES_ar", "es"), ("pt-BR", "pt-BR"), ("pt", None),
     ("pt-PT", None), ("fr-FR", None), (None, None)],
)
def test_each_device_gets_the_translation_its_locale_picks(locale: str | None,
                                                          variant: str | None) -> None:
    content = compiled()
    assert content.variant_for(locale) == variant
    assert content.render(Device(locale=locale)).variant == variant
    assert content.message_for("tok", Device(locale=locale)).variant == variant


def test_a_translation_has_its_own_words_and_the_campaigns_other_data_values() -> None:
    words = compiled().render(Device(locale="es-MX", attributes={"first_name": "Ana"}))
    assert (words.title, words.body) == ("Hola Ana", "La transmisión empieza en android")
    assert words.data == {"landingUrl": "https://example.com/live?u=u%2042", "kind": "en vivo"}


def test_the_campaigns_own_content_for_a_locale_without_a_translation() -> None:
    words = compiled().render(Device(locale="de", user_id=None))
    assert (words.title, words.body) == ("Hi there", "The stream starts now on android")
    assert words.data == {"landingUrl": "https://example.com/live?u=", "kind": "live"}
    assert words.variant is None


# --- the request body ------------------------------------------------------------------------------
def test_a_personalised_body_is_what_message_template_makes_of_the_rendered_words() -> None:
    device = Device(locale="es", attributes={"first_name": "Zoë \"Z\" <3"})
    message = compiled().message_for("token-1", device)
    assert message.failure is None and message.variant == "es"
    assert sent_at_now(message) == expected_body("token-1", 'Hola Zoë "Z" <3',
                                         "La transmisión empieza en android",
                                         {"landingUrl": "https://example.com/live?u=u%2042",
                                          "kind": "en vivo"})


def test_a_variant_without_placeholders_is_encoded_once_and_reads_nothing_of_the_device() -> None:
    content = compiled(data={"kind": "live"})  # the campaign's own title has a placeholder
    message = content.message_for("token-2", Untouchable())  # type: ignore[arg-type]
    assert message.variant == "pt-BR"
    assert sent_at_now(message) == expected_body("token-2", "Olá", "A transmissão começou",
                                         {"kind": "live"})


def test_the_attributes_a_campaign_reads_are_known_once_compiled() -> None:
    assert compiled().attribute_names == {"first_name"}
    assert compiled(translations={"es": Translation(
        title="{{ attributes.city | default('') }}", body="b")}).attribute_names == {
        "first_name", "city"}
    assert compiled("Live", "now", {}, {}).attribute_names == frozenset()


def test_a_campaign_without_placeholders_is_not_personalised() -> None:
    plain = compiled("Live now", "Tap to watch", {"kind": "live"},
                     {"es": Translation(title="En vivo", body="Mira")})
    assert not plain.personalized
    assert compiled().personalized
    device = Device(locale="es-MX")
    assert sent_at_now(plain.message_for("t", device)) == expected_body("t", "En vivo", "Mira",
                                                                {"kind": "live"})


@given(title=st.text(min_size=1, max_size=40), name=st.text(max_size=40),
       token=st.text(min_size=1, max_size=60), with_data=st.booleans(), with_image=st.booleans(),
       with_options=st.booleans())
def test_any_personalised_body_equals_the_shared_path_for_the_same_words(
        title: str, name: str, token: str, with_data: bool, with_image: bool,
        with_options: bool) -> None:
    plain_title = title.replace("{", "(").replace("\r", " ")  # a template sends breaks as \n
    data = {"note": plain_title, "who": '{{ attributes.name | default("nobody") }}'} if with_data else {}
    image = IMAGE if with_image else None
    options = OPTIONS if with_options else None
    content = compiled(plain_title + ' {{ attributes.name | default("you") }}', "Body", data, {},
                       image_url=image, options=options)
    message = content.message_for(token, Device(attributes={"name": name}))
    shown = name if name.strip() else "you"
    rendered_data = ({"note": plain_title, "who": name if name.strip() else "nobody"}
                     if with_data else {})
    assert sent_at_now(message) == expected_body(token, f"{plain_title} {shown}", "Body", rendered_data,
                                         image, options)


def test_a_personalised_body_follows_googles_description() -> None:
    google = Validator()
    for locale in ["es", "pt-BR", None]:
        body = sent_at_now(compiled().message_for("tok", Device(locale=locale)))
        assert body is not None
        assert google.check(orjson.loads(body)) is None


# --- FCM's size rule, per rendered message ---------------------------------------------------------
def size_of(body: str, name: str) -> int:
    """The size rule's count for BODY with the rendered name, measured independently (the
    expiry at its longest, as at creation)."""
    payload = build_payload(f"Hi {name}", body, {}, IMAGE, replace_key=KEY, options=OPTIONS,
                            now_s=SIZED_NOW_S)
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def test_a_message_rendered_over_4096_bytes_fails_that_recipient_with_the_reason() -> None:
    content = compiled(TITLE, "b", {}, {})
    fits = size_of("b", "")
    at_limit = "é" * ((MAX_PAYLOAD_BYTES - fits) // 2) + "x" * ((MAX_PAYLOAD_BYTES - fits) % 2)
    assert size_of("b", at_limit) == MAX_PAYLOAD_BYTES
    accepted = content.message_for("tok", Device(attributes={"first_name": at_limit}))
    assert accepted.failure is None and accepted.body is not None
    over = at_limit + "x"
    refused = content.message_for("tok", Device(attributes={"first_name": over}))
    assert refused.body is None and refused.variant is None
    assert refused.failure == ("the message rendered for this device is 4097 bytes; "
                               "FCM accepts at most 4096")
    assert content.message_for("tok", Device(attributes={"first_name": "Ana"})).body is not None


def test_the_size_counted_at_send_is_payload_size_of_the_rendered_message() -> None:
    content = compiled(TITLE, "b", {"kind": "x" * 2000}, {})
    name = "n" * 2100
    message = content.message_for("tok", Device(attributes={"first_name": name}))
    size = payload_size(build_payload(f"Hi {name}", "b", {"kind": "x" * 2000}, IMAGE,
                                      replace_key=KEY, options=OPTIONS, now_s=SIZED_NOW_S))
    assert message.failure == size_problem(size)
    assert size_problem(MAX_PAYLOAD_BYTES) is None


def test_a_field_that_cannot_be_rendered_fails_that_recipient_with_the_reason() -> None:
    content = compiled(TITLE, "b", {}, {})
    message = content.message_for("tok", Device(attributes={"first_name": "x" * 5000}))
    assert message.body is None
    assert message.failure == ("title rendered for this device is 5003 characters; Herald sends "
                               "at most 4096")


# --- refused at creation ---------------------------------------------------------------------------
def test_content_that_can_be_sent_has_no_problems() -> None:
    assert content_problems(TITLE, BODY, DATA, TRANSLATIONS, image_url=IMAGE, options=OPTIONS) == []


def test_each_problem_names_its_variant_field_and_position() -> None:
    translations = {"es": Translation(title="Hola\n{{ nombre }}", body="{% for x in y %}",
                                      data={"kind": "{{ attributes.kind }}"})}
    problems = content_problems("Hi {{ first_name }}", BODY, DATA, translations)
    assert [(p.field, p.position) for p in problems] == [
        ("title", Position(3, 1, 4)),
        ("translations.es.title", Position(5, 2, 1)),
        ("translations.es.body", Position(0, 1, 1)),
        ("translations.es.data.kind", Position(0, 1, 1)),
    ]
    assert "unknown field 'nombre'" in problems[1].message
    assert "attributes.kind may be missing" in problems[3].message


def test_a_translation_may_only_translate_data_the_campaign_has() -> None:
    translations = {"es": Translation(title="Hola", body="Ya", data={"landingURL": "x"})}
    (problem,) = content_problems("Hi", "Now", {"landingUrl": "https://x"}, translations)
    assert problem.field == "translations.es.data.landingURL" and problem.position is None
    assert "the campaign's data has no key 'landingURL'" in problem.message


def test_a_translation_tag_that_is_not_a_language_tag_is_a_problem() -> None:
    (problem,) = content_problems("Hi", "Now", {}, {"spanish": Translation(title="a", body="b")})
    assert problem.field == "translations.spanish"
    assert "is not a language tag" in problem.message


def test_each_translation_is_held_to_fcms_size_rule_with_placeholders_as_written() -> None:
    placeholder = "{{ attributes.first_name | default('') }}"  # 41 bytes as JSON, renders to ""
    room = MAX_PAYLOAD_BYTES - payload_size(build_payload("Hola", "", {}, replace_key=KEY))
    translations = {
        "es": Translation(title="Hola", body="x" * (room - len(placeholder)) + placeholder),
        "pt": Translation(title="Olá", body="x" * (room - len(placeholder) + 1) + placeholder),
    }
    problems = content_problems("Hi", "b", {}, translations, replace_key=KEY)
    assert [p.field for p in problems] == ["translations.pt"]
    assert problems[0].position is None
    assert problems[0].message == (
        f"the message (notification, data and replacement key) is {MAX_PAYLOAD_BYTES + 1} bytes of "
        "JSON; FCM accepts at most 4096 (placeholders counted as written)")


def test_the_campaigns_own_content_over_the_size_rule_is_a_problem_of_content() -> None:
    (problem,) = content_problems("t", "x" * 4000 + "{{ platform }}" * 10, {}, {})
    assert problem.field == "content"


def test_compiling_content_that_creation_would_refuse_raises_with_every_problem() -> None:
    with pytest.raises(TemplateRefused) as caught:
        compiled("{{ nope }}", "{% set x = 1 %}", {}, {})
    assert [p.field for p in caught.value.problems] == ["title", "body"]


def test_sizes_are_checked_before_any_template_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant over FCM's rule is refused for that alone: its templates (a megabyte of them
    cost 10 s to parse) are never lexed."""
    def unread(field: str, text: str) -> list[TemplateProblem]:
        raise AssertionError(f"{field} was read as a template")

    monkeypatch.setattr(rendering, "check_text", unread)
    translations = {"es": Translation(title="{{ (", body="{{ x }}" * 10,
                                      data={"kind": "{{ (((((" + "y" * 4000})}
    problems = content_problems("Hi {{ nope }}", "b", {"kind": "k"}, translations)
    assert [(p.field, p.kind) for p in problems] == [("translations.es", "size")]


def test_a_message_has_at_most_50_placeholders_in_all_its_texts() -> None:
    ten = "{{ platform }}" * 10
    data = {f"k{i}": ten for i in range(4)}
    assert content_problems(ten, "b", data, {}) == []
    problems = content_problems(ten, ten, data, {
        "es": Translation(title=ten, body=ten + "{{ platform }}", data={"k0": ten, "k1": ten,
                                                                       "k2": ten})})
    assert [(p.field, p.position) for p in problems] == [("content", None),
                                                         ("translations.es", None)]
    assert "60 placeholders ('{{') in one message" in problems[0].message
    assert "51 placeholders" in problems[1].message
    (alone,) = content_problems("t", "{{ platform }}" * 51, {}, {})
    assert (alone.field, alone.message) == ("body", "51 placeholders ('{{'); a message has at "
                                                    "most 50")


# --- the translations as the API takes them --------------------------------------------------------
TRANSLATIONS_IN = TypeAdapter(Translations)


def test_translation_tags_are_stored_canonical() -> None:
    parsed = TRANSLATIONS_IN.validate_python({"PT_br": {"title": "Olá", "body": "Já"},
                                              "zh-hant-tw": {"title": "嗨", "body": "現在"}})
    assert list(parsed) == ["pt-BR", "zh-Hant-TW"]


@pytest.mark.parametrize("translations", [
    {"es": {"title": "a", "body": "b"}, "ES": {"title": "a", "body": "b"}},
    {"spanish": {"title": "a", "body": "b"}},
    {"es": {"title": "", "body": "b"}},
    {"es": {"title": "a", "body": "b", "image_url": "https://x"}},
    {"es": {"title": "a", "body": "b", "data": {"landing_url": "x"}}},
    {f"es-x-{i}": {"title": "a", "body": "b"} for i in range(101)},
])
def test_translations_the_api_refuses(translations: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TRANSLATIONS_IN.validate_python(translations)
