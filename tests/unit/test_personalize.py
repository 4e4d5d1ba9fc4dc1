"""Placeholders in a campaign's words (herald/domain/personalize.py): the grammar cut down to
``{{ field | filter }}``, its refusals with their positions, the sandbox behind it, rendering per
device with defaults, and the cap on what one field may render to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from jinja2 import TemplateError

from herald.domain.personalize import (
    _ENVIRONMENT,
    MAX_RENDERED_CHARS,
    CompiledText,
    Position,
    RenderFailed,
    TemplateProblem,
    TemplateRefused,
    check_text,
    device_context,
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
