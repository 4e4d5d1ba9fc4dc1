"""Placeholders in a campaign's words (herald/domain/personalize.py): the grammar cut down to
``{{ field | filter }}``, its refusals with their positions, the sandbox behind it, rendering per
device with defaults, and the cap on what one field may render to."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import TemplateError

from herald.domain import personalize
from herald.domain.personalize import (
    _ENVIRONMENT,
    _USUAL,
    FILTERS,
    MAX_NESTING,
    MAX_PLACEHOLDER_CHARS,
    MAX_PLACEHOLDERS,
    MAX_PROBLEMS,
    MAX_RENDERED_CHARS,
    CompiledText,
    Position,
    RenderFailed,
    TemplateProblem,
    TemplateRefused,
    _usual_text_fine,
    check_text,
    checked_by_parser,
    device_context,
    usual_and_fine,
)


@dataclass(frozen=True)
class Device:
    platform: str = "android"
    user_id: str | None = "u-42"
    locale: str | None = "es-MX"
    timezone: str | None = "America/Mexico_City"
    attributes: dict[str, Any] = field(default_factory=dict)


def render(text: str, device: Device | None = None) -> str:
    compiled = CompiledText("title", text)
    return compiled.render(device_context(device or Device(), compiled.attribute_names))


def only_problem(text: str) -> TemplateProblem:
    problems = check_text("title", text)
    assert len(problems) == 1, problems
    return problems[0]


# --- rendering -------------------------------------------------------------------------------------
GREETING = 'Hi {{ attributes.first_name | default("there") }}!'


def test_a_placeholder_is_filled_with_the_devices_attribute() -> None:
    assert render(GREETING, Device(attributes={"first_name": "Ana"})) == "Hi Ana!"


@pytest.mark.parametrize("attributes", [{}, {"first_name": ""}, {"first_name": "   "},
                                        {"first_name": None}, {"other": "Ana"}])
def test_the_default_stands_for_a_missing_or_blank_attribute(attributes: dict[str, Any]) -> None:
    assert render(GREETING, Device(attributes=attributes)) == "Hi there!"


def test_the_devices_own_fields_are_filled_in() -> None:
    text = ('{{ user_id | default("-") }} {{ locale | default("-") }} '
            '{{ timezone | default("-") }} {{ platform }}')
    assert render(text) == "u-42 es-MX America/Mexico_City android"
    assert render(text, Device(user_id=None, locale=None, timezone=None)) == "- - - android"


@pytest.mark.parametrize(("value", "shown"), [(True, "true"), (False, "false"), (3, "3"),
                                              (2.5, "2.5"), ("x", "x")])
def test_attribute_values_are_shown_as_text(value: object, shown: str) -> None:
    assert render('{{ attributes.level | default("?") }}', Device(attributes={"level": value})) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{{ attributes.name | default("x") | upper }}', "ANA MARÍA"),
        ('{{ attributes.name | default("x") | lower }}', "ana maría"),
        ('{{ attributes.shout | default("x") | title }}', "Hello World"),
        ('{{ attributes.shout | default("x") | capitalize }}', "Hello world"),
        ('[{{ attributes.padded | default("x") | trim }}]', "[Ana]"),
        ('{{ attributes.long | default("x") | truncate(12) }}', "Live now on…"),
        ('{{ attributes.name | default("x") | truncate(40) }}', "Ana María"),
        ('{{ attributes.name | default("x") | urlencode }}', "Ana%20Mar%C3%ADa"),
        ('{{ platform | upper }}', "ANDROID"),
        ('{{ "{{" }} literal', "{{ literal"),
        ('{{- platform -}}  !', "android!"),
    ],
)
def test_the_allowed_filters(text: str, shown: str) -> None:
    device = Device(attributes={"name": "Ana María", "shout": "hELLO wORLD", "padded": "  Ana ",
                                "long": "Live now on channel seven"})
    assert render(text, device) == shown


def test_plain_text_never_reaches_the_template_engine() -> None:
    for text in ["Live now", "Curly { and } and }} alone", "50% off {today}", ""]:
        compiled = CompiledText("title", text)
        assert not compiled.personal
        assert compiled.attribute_names == frozenset()
        assert compiled.render({}) is text  # the context is not even read


def test_the_attributes_a_text_reads_are_known_at_compile_time() -> None:
    compiled = CompiledText("body", '{{ attributes.a | default("") }}{{ attributes.b | default("") }}'
                                    '{{ attributes.a | default("") }} {{ platform }}')
    assert compiled.attribute_names == {"a", "b"}
    context = device_context(Device(attributes={"a": "1", "b": "2", "c": "secret"}),
                             compiled.attribute_names)
    assert context["attributes"] == {"a": "1", "b": "2"}


def test_a_field_that_renders_too_long_fails_that_device_with_a_reason() -> None:
    compiled = CompiledText("body", 'Dear {{ attributes.name | default("you") }}')
    context = device_context(Device(attributes={"name": "x" * MAX_RENDERED_CHARS}), {"name"})
    with pytest.raises(RenderFailed) as caught:
        compiled.render(context)
    assert caught.value.reason == (f"body rendered for this device is {MAX_RENDERED_CHARS + 5} "
                                   f"characters; Herald sends at most {MAX_RENDERED_CHARS}")
    fits = device_context(Device(attributes={"name": "x" * (MAX_RENDERED_CHARS - 5)}), {"name"})
    assert len(compiled.render(fits)) == MAX_RENDERED_CHARS


def test_a_device_without_a_platform_fails_alone_with_a_reason() -> None:
    compiled = CompiledText("title", "On {{ platform }}")
    with pytest.raises(RenderFailed, match="title could not be rendered for this device"):
        compiled.render({"attributes": {}})


# --- the grammar, refused at creation with a position ----------------------------------------------
@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        # an unknown field, with or without a default
        ("Hi {{ first_name }}", 4, "unknown field 'first_name'"),
        ('Hi {{ name | default("x") }}', 4, "unknown field 'name'"),
        ("Hi {{ device.token }}", 4, "device has no fields"),
        ("{{ attributes }}", 1, "attributes needs a name"),
        # a field a device may lack, without a default first
        ("Hi {{ attributes.first_name }}", 4, "attributes.first_name may be missing on a device"),
        ('Hi {{ attributes.first_name | upper | default("x") }}', 4, "give it a default first"),
        ("{{ user_id }}", 1, "user_id may be missing"),
        ("{{ locale | upper }}", 1, "locale may be missing"),
        ("{{ timezone }}", 1, "timezone may be missing"),
        # filters outside the allowed few, or with other arguments
        ("{{ platform | safe }}", 1, "filter 'safe' is not allowed"),
        ('{{ platform | replace("a", "b") }}', 1, "filter 'replace' is not allowed"),
        ("{{ platform | attr('__class__') }}", 1, "filter 'attr' is not allowed"),
        ("{{ platform | upper(1) }}", 1, "filter 'upper' takes no arguments"),
        ("{{ platform | default(platform) }}", 1, "default takes one text in quotes"),
        ('{{ platform | default("a", true) }}', 1, "default takes one text in quotes"),
        ('{{ platform | default(value="a") }}', 1, "takes no keyword"),
        ("{{ platform | truncate(0) }}", 1, "truncate takes one whole number"),
        ('{{ platform | truncate("5") }}', 1, "truncate takes one whole number"),
        ("{{ platform | truncate(true) }}", 1, "truncate takes one whole number"),
        # expressions that are not a field
        ("{{ 7 * 6 }}", 1, "found arithmetic"),
        ("{{ -platform }}", 1, "found arithmetic"),
        ('{{ platform == "ios" }}', 1, "found a comparison"),
        ("{{ platform if platform else platform }}", 1, "found a condition"),
        ('{{ platform ~ "!" }}', 1, "found a concatenation"),
        ("{{ platform is defined }}", 1, "found a test"),
        ("{{ [platform] }}", 1, "found a list"),
        ("{{ 42 }}", 1, "found a const"),
    ],
)
def test_what_the_grammar_does_not_have_is_refused_where_it_stands(
        text: str, column: int, message: str) -> None:
    problem = only_problem(text)
    assert problem.field == "title"
    assert problem.position == Position(column - 1, 1, column)
    assert message in problem.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{ attributes.__class__ }}", "'__class__' cannot be a device attribute"),
        ('{{ attributes.__class__ | default("x") }}', "'__class__' cannot be a device attribute"),
        ("{{ attributes._secret }}", "'_secret' cannot be a device attribute"),
        ("{{ user_id.__len__ }}", "user_id has no fields"),
        ("{{ platform.__class__.__mro__ }}", "has no fields"),
        ('{{ attributes.first_name.upper | default("x") }}', "has no fields"),
        ("{{ attributes.items }}", "attributes.items may be missing"),
        ('{{ attributes["first_name"] }}', "found a subscript"),
        ("{{ platform[0] }}", "found a subscript"),
        ("{{ platform.upper() }}", "found a call"),
        ('{{ "{}".format(platform) }}', "found a call"),
        ("{{ range(10) }}", "found a call"),
        ("{{ lipsum }}", "unknown field 'lipsum'"),
        ("{{ self }}", "unknown field 'self'"),
        ("{{ cycler }}", "unknown field 'cycler'"),
        ("{{ config }}", "unknown field 'config'"),
    ],
)
def test_the_sandbox_refuses_anything_beyond_the_devices_fields(text: str, message: str) -> None:
    assert message in only_problem(text).message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{% for a in attributes %}{{ platform }}{% endfor %}", "statements ({% ... %})"),
        ("{% set name = platform %}", "statements ({% ... %})"),
        ("{% import 'secrets.txt' as s %}", "statements ({% ... %})"),
        ("{% include '/etc/passwd' %}", "statements ({% ... %})"),
        ("{% extends 'base' %}", "statements ({% ... %})"),
        ("{% macro m() %}x{% endmacro %}", "statements ({% ... %})"),
        ("{% if platform %}x{% endif %}", "statements ({% ... %})"),
        ("{% raw %}{{ x }}{% endraw %}", "statements ({% raw %})"),
        ("{# a note #}", "comments ({# ... #})"),
        ("{# never closed", "comments ({# ... #})"),
    ],
)
def test_statements_and_comments_are_refused_where_they_start(text: str, message: str) -> None:
    problems = check_text("body", "Go! " + text)
    assert problems[0].position == Position(4, 1, 5)
    assert message in problems[0].message
    with pytest.raises(TemplateRefused):
        CompiledText("body", "Go! " + text)


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("Hi {{ platform", 4, "'{{' is never closed by '}}'"),
        ("Hi {{ }}", 4, "syntax error: Expected an expression"),
        ("Hi {{ platform | }}", 4, "syntax error"),
        ("Hi {{ platform platform }}", 4, "syntax error"),
        ('Hi {{ "open }}', 4, "syntax error: unexpected char"),
        ('Hi {{ platform | default("x) }}', 4, "syntax error"),
    ],
)
def test_a_syntax_error_is_reported_at_its_placeholder(text: str, column: int, message: str) -> None:
    problem = only_problem(text)
    assert problem.position is not None and problem.position.column == column
    assert message in problem.message


def test_positions_count_lines_and_columns_from_one_whatever_the_line_breaks() -> None:
    for newline in ["\n", "\r\n", "\r"]:
        text = f"Hello{newline}and {{{{ nope }}}}{newline}{newline}  {{{{ user_id }}}}"
        first, second = check_text("body", text)
        assert first.position == Position(10, 2, 5)
        assert second.position == Position(24, 4, 3)
        assert str(first) == ("body, line 2, column 5: unknown field 'nope': a placeholder may "
                              "use user_id, locale, timezone, platform or attributes.<name>")


def test_every_problem_of_a_text_is_reported_in_order() -> None:
    text = "{{ a }} {{ platform | upper }} {% set x = 1 %} {{ b }}"
    problems = check_text("data.landingUrl", text)
    assert [(p.field, p.position.column if p.position else None) for p in problems] == [
        ("data.landingUrl", 1), ("data.landingUrl", 32), ("data.landingUrl", 48)]
    with pytest.raises(TemplateRefused) as caught:
        CompiledText("data.landingUrl", text)
    assert caught.value.problems == tuple(problems)


def test_a_closing_brace_pair_inside_quotes_is_text_not_an_end() -> None:
    assert check_text("title", '{{ attributes.x | default("}} {% {#") }}') == []
    assert render('{{ attributes.x | default("}} {% {#") }}') == "}} {% {#"


# --- the sandbox behind the grammar ----------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "{{ attributes.__class__ }}",
        "{{ attributes.items }}",
        "{{ attributes.get }}",
        "{{ user_id.__class__.__mro__ }}",
        "{{ platform.upper }}",
        "{{ attributes['__class__'] }}",
        "{{ ''.__class__.__subclasses__ }}",
        "{{ range }}",
        "{{ lipsum }}",
    ],
)
def test_the_environment_alone_reaches_nothing_beyond_the_devices_values(text: str) -> None:
    """Even a template that skipped the grammar check: attribute access reads the attributes'
    keys and nothing else, and there are no globals."""
    template = _ENVIRONMENT.from_string(text)
    with pytest.raises(TemplateError):
        template.render(device_context(Device(), ()))


def test_the_environment_reads_an_attribute_named_like_a_dict_method_as_that_attribute() -> None:
    assert render('{{ attributes.items | default("none") }}') == "none"
    assert render('{{ attributes.items | default("none") }}',
                  Device(attributes={"items": "3 items"})) == "3 items"


@pytest.mark.parametrize("text", ["{{ platform | attr('upper') }}", "{{ platform | map('x') }}",
                                  "{{ platform | safe }}", "{{ platform is string }}"])
def test_the_environment_has_only_the_allowed_filters_and_no_tests(text: str) -> None:
    with pytest.raises(TemplateError):
        _ENVIRONMENT.from_string(text)


def test_autoescape_is_off_push_text_is_not_html() -> None:
    device = Device(attributes={"name": "<b>Tom & Jerry</b>"})
    assert render('{{ attributes.name | default("") }}', device) == "<b>Tom & Jerry</b>"


def test_a_template_sends_its_line_breaks_as_newlines_and_plain_text_as_written() -> None:
    assert render("Live\r\nnow on {{ platform }}") == "Live\nnow on android"
    assert CompiledText("title", "Live\r\nnow").render({}) == "Live\r\nnow"


# --- bounded (issue 31) ----------------------------------------------------------------------------
NESTED_100 = "{{ " + "(" * 100 + "user_id" + ")" * 100 + " }}"


def test_a_hundred_nested_parentheses_are_a_problem_naming_the_field_not_a_crash() -> None:
    """Jinja2's parser recurses once per bracket: this was a RecursionError, a 500."""
    (problem,) = check_text("data.landingUrl", "go " + NESTED_100)
    assert (problem.field, problem.position) == ("data.landingUrl", Position(3, 1, 4))
    assert problem.message == f"brackets nest more than {MAX_NESTING} deep in this placeholder"


@pytest.mark.parametrize("text", [
    NESTED_100,
    "{{ " + "(" * 5 + "platform" + ")" * 5 + " }}",
    "{{ " + "[" * 3000 + "]" * 3000 + " }}",
    "{{ " + "not " * 1000 + "platform }}",
    "{{ " + "-" * 5000 + "platform }}",
    "{{ platform" + " | upper" * 1000 + " }}",
    "{{ platform" + ".a" * 3000 + " }}",
    "{{ platform" + " ~ platform" * 1000 + " }}",
    "{{ " + "(" * 3000,
    '{{ attributes.x | default("' + "y" * 300 + '") }}',
])
def test_deep_or_long_placeholders_are_refused_as_problems(text: str) -> None:
    problems = check_text("body", text)
    assert problems and all(problem.field == "body" for problem in problems)


def test_a_placeholder_is_at_most_256_characters() -> None:
    fits = '{{ attributes.x | default("' + "y" * (MAX_PLACEHOLDER_CHARS - 32) + '") }}'
    assert len(fits) == MAX_PLACEHOLDER_CHARS and check_text("body", fits) == []
    (problem,) = check_text("body", fits.replace("yy", "yyy", 1))
    assert "at most 256 characters" in problem.message


def test_a_text_has_at_most_50_placeholders_counted_before_any_parsing() -> None:
    assert check_text("body", "{{ platform }} " * MAX_PLACEHOLDERS) == []
    (problem,) = check_text("body", "{{ platform }} " * (MAX_PLACEHOLDERS + 1))
    assert (problem.field, problem.position) == ("body", None)
    assert "51 placeholders" in problem.message


def test_problems_are_reported_for_the_first_ten_at_most() -> None:
    assert len(check_text("body", "{% x %}" * 40)) == MAX_PROBLEMS


def test_a_text_the_parser_checked_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = personalize.checked_by_parser

    def counted(field: str, normalized: str) -> list[TemplateProblem]:
        parsed.append(normalized)
        return real(field, normalized)

    monkeypatch.setattr(personalize, "checked_by_parser", counted)
    text = "Hi {{ (user_id) | default('you') }} {{ nope }} " + uuid.uuid4().hex
    first = check_text("title", text)
    again = check_text("translations.es.title", text)
    assert len(parsed) == 1
    assert [p.field for p in again] == ["translations.es.title"]
    assert [(p.position, p.message) for p in again] == [(p.position, p.message) for p in first]


def test_usual_placeholders_are_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(field: str, normalized: str) -> list[TemplateProblem]:
        raise AssertionError("parsed")

    monkeypatch.setattr(personalize, "checked_by_parser", refused)
    usual = ('Hi {{ attributes.first_name | default("there") | title }}, '
             "{{ platform }} {{ locale | default('es') | upper | truncate(20) }} {")
    assert check_text("body", usual * 16) == []


# The usual shape (one regular expression) and Jinja2's parser must agree on every placeholder
# the expression matches: "fine" from the first only where the second finds it fine too.
_FILTERS = st.sampled_from([*FILTERS, "nope", "items"])
_ARGS = st.one_of(st.none(), st.integers(0, 9999).map(str),
                  st.text(st.characters(exclude_characters='"\\{}', codec="utf-8"),
                          max_size=8).map(lambda t: f'"{t}"'),
                  st.text(st.characters(exclude_characters="'\\{}", codec="utf-8"),
                          max_size=8).map(lambda t: f"'{t}'"))
_SPACE = st.sampled_from(["", " ", "  ", "\n", "\t", "\u3000"])
_FIELD = st.one_of(st.sampled_from(["user_id", "locale", "timezone", "platform", "attributes",
                                    "attributes.x", "attributes.not", "attributes.in_",
                                    "attributes.A9_", "attributes.9a", "nope"]),
                   st.from_regex(r"attributes\.[A-Za-z][A-Za-z0-9_]{0,63}", fullmatch=True))


@st.composite
def placeholders(draw: st.DrawFn) -> str:
    filters = draw(st.lists(st.tuples(_SPACE, _FILTERS, _ARGS, _SPACE), max_size=4))
    chain = "".join(f"{a}|{b}{name}" + (f"({arg})" if arg is not None else "")
                    for a, name, arg, b in filters)
    return f"{{{{{draw(_SPACE)}{draw(_FIELD)}{chain}{draw(_SPACE)}}}}}"


@settings(max_examples=3000, deadline=None)
@given(source=placeholders())
def test_the_usual_shape_and_the_parser_agree(source: str) -> None:
    by_parser = checked_by_parser("f", source) == []
    assert usual_and_fine(source) == by_parser or not usual_and_fine(source), source
    if _USUAL.fullmatch(source):
        assert usual_and_fine(source) == by_parser, source


@settings(max_examples=1000, deadline=None)
@given(parts=st.lists(st.one_of(placeholders(), st.text(max_size=6)), max_size=6))
def test_a_text_fine_in_the_usual_shape_is_fine_for_the_parser(parts: list[str]) -> None:
    text = "".join(parts).replace("\r", "")
    if _usual_text_fine(text):
        assert checked_by_parser("f", text) == [], text
