"""Placeholders in a campaign's words: ``Hi {{ attributes.first_name | default("there") }}``.

A title, a body or a data value may name the device's fields between ``{{`` and ``}}``; the
sender fills them in for each device. Text without ``{{``, ``{%`` or ``{#`` is plain text: it is
sent as written and never touches the template engine.

**The grammar**, and nothing more: a placeholder is ``{{ field }}`` or
``{{ field | filter | filter ... }}`` where

- ``field`` is ``user_id``, ``locale``, ``timezone``, ``platform`` or ``attributes.<name>`` (a
  device attribute, named as devices name them: a letter, then letters, digits or ``_``), or a
  text in quotes, which is how a literal ``{{`` is written: ``{{ "{{" }}``;
- a filter is ``default("text")``, ``upper``, ``lower``, ``title``, ``capitalize``, ``trim``,
  ``truncate(n)`` (at most ``n`` characters, cut at a word, ending in ``…``) or ``urlencode``
  (for a device's values inside a link in ``data``).

No statements (``{% ... %}``: no loops, ``set``, ``import``, ``include``, ``extends``, ``macro``,
``raw``), no comments, no calls, no subscripts, no arithmetic, no comparisons, no tests, no
attribute other than ``attributes.<name>``. Jinja2 parses the text (so its syntax errors, and a
``}}`` inside quotes, are Jinja's), then Herald walks each placeholder's syntax tree and refuses
any node outside that grammar, with the position of the placeholder's ``{{``. The template is
then compiled by Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`, narrowed
further: no globals, no tests, only the filters above, and ``a.b`` reads a key of the device's
attributes and nothing else (``{{ attributes.items }}`` is the attribute named ``items``, never
the dict's method), so that even a template that escaped the grammar check could reach nothing
but the device's own fields. Autoescape is off: push text is not HTML.

**Bounded.** A placeholder is at most :data:`MAX_PLACEHOLDER_CHARS` characters with brackets
nested at most :data:`MAX_NESTING` deep, and a message (one variant: title, body and data) has
at most :data:`MAX_PLACEHOLDERS` of them; past either, the text is refused with its field
before Jinja2 parses it (Jinja2's parser recurses once per bracket: 100 nested parentheses were
a ``RecursionError``, a 500). Every text is also as long as FCM's 4,096 bytes allow, and that
is checked first (``herald.domain.rendering.content_problems``). A placeholder in the usual
shape (a field, then filters with a quoted text or a number) is checked by one regular
expression; any other goes through Jinja2's parser and the walk below, which say what is wrong.

**A field a device may lack needs a default, checked at creation.** The issue asks for "an
unknown field without a default" to be refused at creation; a name outside the five fields is
refused outright, with or without a default. Attributes are free-form: no campaign can know at
creation which devices will have ``attributes.first_name``, and ``user_id``, ``locale`` and
``timezone`` are optional on a device too. Herald refuses, at creation, any placeholder over
such a field whose first filter is not ``default(...)`` (only ``platform``, which every device
has, may stand alone). The other choice, failing at send each recipient that lacks the field,
would turn a missing first name into a failed notification, counted in the thousands on a large
audience and found only afterwards; a fallback text chosen at creation costs the operator one
word. ``default`` also replaces a value that is empty or only spaces (``Hi !`` is never sent).

**At send**, values are the device's own, as text (``true``/``false`` for booleans, numbers as
Python writes them). A field whose rendering exceeds :data:`MAX_RENDERED_CHARS` fails that
recipient with a reason (:class:`RenderFailed`), as does anything Jinja2 refuses at render; the
campaign goes on. Jinja2 sends every line break of a template as ``\n`` (``\r\n`` in a text with
placeholders arrives as ``\n``; plain text is sent as written).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, nodes
from jinja2.environment import Template
from jinja2.filters import do_capitalize, do_lower, do_title, do_trim, do_upper, do_urlencode
from jinja2.sandbox import ImmutableSandboxedEnvironment

ALWAYS_PRESENT = frozenset({"platform"})
"""Fields every device has: a placeholder over one needs no default."""
MAYBE_MISSING = frozenset({"user_id", "locale", "timezone"})
"""Fields a device may lack (optional in ``DeviceIn``); so may every ``attributes.<name>``."""
ATTRIBUTES = "attributes"
FIELDS_HELP = "user_id, locale, timezone, platform or attributes.<name>"

ATTRIBUTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""As ``herald.domain.types.AttributeName``: a device can only have attributes named so."""

MAX_RENDERED_CHARS = 4096
"""Characters one field may render to. A message is at most 4096 bytes anyway; the cap keeps a
device's overlong attribute from costing more than one such message."""

MARKERS = ("{{", "{%", "{#")
"""What makes a text a template; without any of them it is plain text."""

MAX_PLACEHOLDER_CHARS = 256
"""A placeholder from ``{{`` to ``}}``: room for a field, a default of a sentence and a few
filters (``{{ attributes.first_name | default("there") | title }}`` is 48)."""
MAX_NESTING = 4
"""Brackets inside brackets in one placeholder; the grammar needs one (a filter's argument)."""
MAX_PLACEHOLDERS = 50
"""Placeholders in one message (a variant's title, body and data together), counting every
``{{``; a text alone has at most as many."""
MAX_PROBLEMS = 10
"""Problems reported per text; a text with more is refused for the first ten."""


def _default(value: Any, fallback: str) -> Any:
    if isinstance(value, Undefined) or (isinstance(value, str) and not value.strip()):
        return fallback
    return value


def _truncate(value: Any, length: int) -> str:
    text = str(value)
    if len(text) <= length:
        return text
    head = text[:length]  # the last word kept ends before a space among these, or is cut
    kept = head.rsplit(" ", 1)[0].rstrip() if " " in head.strip() else ""
    return (kept or text[:length - 1]) + "…"


MAX_TRUNCATE = MAX_RENDERED_CHARS
FILTERS: dict[str, Callable[..., Any]] = {
    "default": _default, "upper": do_upper, "lower": do_lower, "title": do_title,
    "capitalize": do_capitalize, "trim": do_trim, "truncate": _truncate,
    "urlencode": do_urlencode,
}
FILTERS_HELP = ('default("text"), upper, lower, title, capitalize, trim, truncate(n) '
                "or urlencode")


class _PlaceholderEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, narrowed: ``a.b`` is the key ``b`` of the mapping ``a`` (the
    device's attributes) and nothing else, on any object; ``a[b]`` is never anything."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return self.undefined(obj=obj, name=attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self.undefined(obj=obj, name=str(argument))


def _environment() -> _PlaceholderEnvironment:
    environment = _PlaceholderEnvironment(autoescape=False, undefined=StrictUndefined,
                                          keep_trailing_newline=True, auto_reload=False)
    environment.globals.clear()
    environment.tests.clear()
    environment.filters = dict(FILTERS)
    return environment


_ENVIRONMENT = _environment()
"""Holds no connection and no state between renders; built once, like a compiled regex."""


# --- problems --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Position:
    """Where in a text a problem is: ``offset`` characters from its start (a line break counts
    as one), at ``line`` and ``column`` (both from 1)."""

    offset: int
    line: int
    column: int

    @classmethod
    def of(cls, text: str, offset: int) -> Position:
        line_start = text.rfind("\n", 0, offset) + 1
        return cls(offset, text.count("\n", 0, offset) + 1, offset - line_start + 1)


@dataclass(frozen=True, slots=True)
class TemplateProblem:
    """Why a campaign cannot be created: the field (``title``, ``data.landingUrl``,
    ``translations.es.body``...), where in it (None: the field as a whole), and what is wrong."""

    field: str
    position: Position | None
    message: str
    kind: str = "template"
    """``template`` (a placeholder), ``size`` (a variant over FCM's size rule) or
    ``translation`` (a tag or a data key a translation may not have)."""

    @property
    def variant(self) -> str:
        """The variant the problem is in: a translation's tag, or ``default``."""
        parts = self.field.split(".")
        return parts[1] if parts[0] == "translations" and len(parts) > 1 else "default"

    def __str__(self) -> str:
        if self.position is None:
            return f"{self.field}: {self.message}"
        return (f"{self.field}, line {self.position.line}, column {self.position.column}: "
                f"{self.message}")


class TemplateRefused(ValueError):
    """A text that is not a placeholder template Herald renders."""

    def __init__(self, problems: Collection[TemplateProblem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


class RenderFailed(ValueError):
    """A template could not be rendered for one device: that recipient fails, with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- checking --------------------------------------------------------------------------------------
def is_template(text: str) -> bool:
    """Whether ``text`` is read as a template (it holds ``{{``, ``{%`` or ``{#``)."""
    return any(marker in text for marker in MARKERS)


@dataclass(frozen=True, slots=True)
class _Placeholder:
    start: int
    source: str


_REFUSED_TOKENS = {
    "block_begin": "statements ({% ... %}) are not allowed, only placeholders {{ ... }}",
    "raw_begin": "statements ({% raw %}) are not allowed; write a literal brace pair as "
                 '{{ "{{" }}',
    "comment_begin": "comments ({# ... #}) are not allowed",
    "linestatement_begin": "statements are not allowed",
    "linecomment_begin": "comments are not allowed",
}


def _normalized(text: str) -> str:
    """Line breaks as Jinja2 reads them, so its tokens can be found in the text."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


class _Scanner:
    """Walks Jinja2's tokens of one text: the placeholders it finds (a ``}}`` inside quotes is
    not an end), and a problem where each statement, comment or raw block starts, where a
    placeholder grows too long or nests too deep, and where the text's syntax breaks."""

    def __init__(self, field: str, text: str) -> None:
        self.field, self.text = field, text
        self.placeholders: list[_Placeholder] = []
        self.problems: list[TemplateProblem] = []
        self.cursor = 0
        self.opened: int | None = None
        self.depth = 0
        self.spoilt = False
        """The open placeholder is refused already (too long or too deep): not parsed."""

    def problem(self, at: int, message: str) -> None:
        self.problems.append(TemplateProblem(self.field, Position.of(self.text, at), message))

    def scan(self) -> None:
        try:
            for _, kind, value in _ENVIRONMENT.lex(self.text):
                self.token(kind, value)
                if len(self.problems) >= MAX_PROBLEMS:
                    return
        except TemplateSyntaxError as exc:
            self.problem(self.cursor if self.opened is None else self.opened, _syntax(exc))
            return
        if self.opened is not None:
            self.problem(self.opened, "'{{' is never closed by '}}'")

    def token(self, kind: str, value: str) -> None:
        found = self.text.find(value, self.cursor)
        at = found if found >= 0 else self.cursor
        self.cursor = at + len(value)
        if kind == "variable_begin":
            self.opened, self.depth, self.spoilt = at, 0, False
        elif kind == "variable_end" and self.opened is not None:
            self.too_long()
            if not self.spoilt:
                self.placeholders.append(_Placeholder(self.opened,
                                                      self.text[self.opened:self.cursor]))
            self.opened = None
        elif kind in _REFUSED_TOKENS:
            self.problem(at, _REFUSED_TOKENS[kind])
        elif self.opened is not None and not self.spoilt:
            self.inside(kind, value)

    def too_long(self) -> bool:
        """Whether the open placeholder is refused for its length (now, or before)."""
        assert self.opened is not None
        if not self.spoilt and self.cursor - self.opened > MAX_PLACEHOLDER_CHARS:
            self.spoilt = True
            self.problem(self.opened, f"a placeholder is at most {MAX_PLACEHOLDER_CHARS} "
                                      "characters from '{{' to '}}'")
        return self.spoilt

    def inside(self, kind: str, value: str) -> None:
        """A token of the open placeholder: refuse it once it is too long or too deep."""
        assert self.opened is not None
        if kind == "operator":
            self.depth += (value in _OPENERS) - (value in _CLOSERS)
        if self.too_long():
            return
        if self.depth > MAX_NESTING:
            self.spoilt = True
            self.problem(self.opened, f"brackets nest more than {MAX_NESTING} deep in this "
                                      "placeholder")


def _scan(field: str, text: str) -> tuple[list[_Placeholder], list[TemplateProblem]]:
    """The placeholders of ``text`` as Jinja2's own lexer finds them, and the problems found
    on the way (:class:`_Scanner`)."""
    scanner = _Scanner(field, text)
    scanner.scan()
    return scanner.placeholders, scanner.problems


def _syntax(exc: TemplateSyntaxError) -> str:
    return f"syntax error: {exc.message}" if exc.message else "syntax error"


def _placeholder_expression(placeholder: _Placeholder) -> nodes.Expr:
    """The one expression between a placeholder's braces (TemplateSyntaxError if none)."""
    tree = _ENVIRONMENT.parse(placeholder.source)
    expressions = [node for output in tree.body if isinstance(output, nodes.Output)
                   for node in output.nodes if not isinstance(node, nodes.TemplateData)]
    if len(tree.body) != 1 or len(expressions) != 1:
        raise TemplateSyntaxError("expected one expression", 1)
    return expressions[0]


def _filters_of(expression: nodes.Expr) -> tuple[nodes.Expr | None, list[nodes.Filter]]:
    """The expression under a chain of filters, and the filters in the order they apply."""
    chain: list[nodes.Filter] = []
    base: nodes.Expr | None = expression
    while isinstance(base, nodes.Filter):
        chain.append(base)
        base = base.node
    return base, chain[::-1]


_NODE_NAMES = {
    "Call": "a call", "Getitem": "a subscript ([...])", "Slice": "a slice", "Test": "a test (is)",
    "Compare": "a comparison", "CondExpr": "a condition (if/else)", "Concat": "a concatenation (~)",
    "And": "a boolean operator", "Or": "a boolean operator", "Not": "a boolean operator",
    "List": "a list", "Tuple": "a tuple", "Dict": "a dict",
}


def _field_refusal(base: nodes.Expr | None) -> str | None:
    if isinstance(base, nodes.Name):
        if base.name == ATTRIBUTES:
            return "attributes needs a name, e.g. attributes.first_name"
        if base.name in ALWAYS_PRESENT | MAYBE_MISSING:
            return None
        return f"unknown field {base.name!r}: a placeholder may use {FIELDS_HELP}"
    if isinstance(base, nodes.Getattr):
        return _attribute_refusal(base)
    if isinstance(base, nodes.Const) and isinstance(base.value, str):
        return None
    found = _NODE_NAMES.get(type(base).__name__, "arithmetic" if isinstance(
        base, nodes.BinExpr | nodes.UnaryExpr) else f"a {type(base).__name__.lower()}")
    return (f"only a field ({FIELDS_HELP}), optionally followed by filters, may stand between "
            f"{{{{ and }}}}; found {found}")


def _attribute_refusal(getattr_node: nodes.Getattr) -> str | None:
    owner = getattr_node.node
    if not (isinstance(owner, nodes.Name) and owner.name == ATTRIBUTES):
        named = owner.name if isinstance(owner, nodes.Name) else "this value"
        return f"{named} has no fields: only attributes.<name> names something inside a field"
    if not ATTRIBUTE_NAME.fullmatch(getattr_node.attr):
        return (f"{getattr_node.attr!r} cannot be a device attribute: attribute names are a "
                "letter, then letters, digits or '_'")
    return None


def _filter_refusal(chain_filter: nodes.Filter) -> str | None:
    name = chain_filter.name
    if name not in FILTERS:
        return f"filter {name!r} is not allowed; the filters are {FILTERS_HELP}"
    if chain_filter.kwargs or chain_filter.dyn_args or chain_filter.dyn_kwargs:
        return f"filter {name!r} takes no keyword or unpacked arguments"
    args = chain_filter.args
    if name == "default":
        ok = len(args) == 1 and isinstance(args[0], nodes.Const) and isinstance(args[0].value, str)
        return None if ok else 'default takes one text in quotes, e.g. default("there")'
    if name == "truncate":
        value = args[0].value if len(args) == 1 and isinstance(args[0], nodes.Const) else None
        ok = type(value) is int and 1 <= value <= MAX_TRUNCATE
        return None if ok else f"truncate takes one whole number from 1 to {MAX_TRUNCATE}"
    return f"filter {name!r} takes no arguments" if args else None


def _field_name(base: nodes.Expr | None) -> str | None:
    """``user_id``, ``attributes.first_name``...: the device field ``base`` reads, if any."""
    if isinstance(base, nodes.Name):
        return base.name
    if isinstance(base, nodes.Getattr):
        return f"{ATTRIBUTES}.{base.attr}"
    return None


def _default_refusal(base: nodes.Expr | None, chain: list[nodes.Filter]) -> str | None:
    field = _field_name(base)
    if field is None or field in ALWAYS_PRESENT or (chain and chain[0].name == "default"):
        return None
    return (f"{field} may be missing on a device: give it a default first, e.g. "
            f'{{{{ {field} | default("...") }}}}')


def _refusal(expression: nodes.Expr) -> str | None:
    """Why ``expression`` is outside the placeholder grammar, or None."""
    base, chain = _filters_of(expression)
    refusals = (_field_refusal(base), *(_filter_refusal(f) for f in chain),
                _default_refusal(base, chain))
    return next((refusal for refusal in refusals if refusal), None)


_STRING = r"""(?:"[^"\\{}]*"|'[^'\\{}]*')"""
_FIELD = "|".join([*sorted(ALWAYS_PRESENT | MAYBE_MISSING),
                   rf"{ATTRIBUTES}\.{ATTRIBUTE_NAME.pattern}"])
_USUAL = re.compile(
    rf"""\{{\{{\s*(?P<field>{_FIELD})
    (?P<filters>(?:\s*\|\s*[a-z]+(?:\(\s*(?:{_STRING}|[1-9][0-9]{{0,3}})\s*\))?)*)\s*\}}\}}""",
    re.VERBOSE)
"""A placeholder in the usual shape: a field, then filters, each with at most one argument, a
text in quotes (no backslash, no brace) or a whole number. Jinja2 reads every such placeholder
as this says (a property test holds the two to the same verdicts)."""
_USUAL_FILTER = re.compile(rf"\|\s*(?P<name>[a-z]+)(?:\(\s*(?P<arg>{_STRING}|[0-9]+)\s*\))?")
_PLAIN = r"(?:[^{]|\{(?![{%#]))*"
_USUAL_TEXT = re.compile(f"{_PLAIN}(?:{_USUAL.pattern}{_PLAIN})*", re.VERBOSE)
"""A text of plain runs (no ``{{``, ``{%`` or ``{#``) and usual placeholders: Jinja2's lexer
finds exactly those placeholders in it (a usual placeholder's texts hold no brace)."""


def _usual_text_fine(text: str) -> bool:
    """Whether ``text`` is plain runs and usual placeholders, each short and within the
    grammar: then it is fine, and neither Jinja2's lexer nor its parser need see it (they
    cost about 100 µs a placeholder)."""
    if not _USUAL_TEXT.fullmatch(text):
        return False
    return all(len(found.group()) <= MAX_PLACEHOLDER_CHARS and usual_and_fine(found.group())
               for found in _USUAL.finditer(text))


def usual_and_fine(source: str) -> bool:
    """Whether ``source`` (a placeholder, ``{{`` to ``}}``) is in the usual shape and within
    the grammar, as the regular expression alone tells; False says nothing (the parser
    decides)."""
    usual = _USUAL.fullmatch(source)
    if usual is None:
        return False
    chain = [(f["name"], f["arg"]) for f in _USUAL_FILTER.finditer(usual["filters"])]
    if usual["field"] not in ALWAYS_PRESENT and (not chain or chain[0][0] != "default"):
        return False
    return all(_usual_filter_fine(name, arg) for name, arg in chain)


def _usual_filter_fine(name: str, arg: str | None) -> bool:
    if name == "default":
        return arg is not None and arg[0] in "\"'"
    if name == "truncate":
        return arg is not None and arg.isdigit() and 1 <= int(arg) <= MAX_TRUNCATE
    return name in FILTERS and arg is None


def _placeholder_problems(field: str, text: str,
                          placeholder: _Placeholder) -> Iterator[TemplateProblem]:
    if usual_and_fine(placeholder.source):
        return
    try:
        refusal = _refusal(_placeholder_expression(placeholder))
    except TemplateSyntaxError as exc:
        refusal = _syntax(exc)
    except RecursionError:  # not reached within the bounds above; a 422, never a 500
        refusal = "this placeholder nests too deep"
    if refusal:
        yield TemplateProblem(field, Position.of(text, placeholder.start), refusal)


def placeholder_count(text: str) -> int:
    """An upper bound of the placeholders in ``text``: its ``{{``, counted without parsing."""
    return text.count("{{")


def check_text(field: str, text: str) -> list[TemplateProblem]:
    """What is wrong with ``text`` as a template, each with its place; [] if it is fine (plain
    text always is). ``field`` names the text in the problems (``title``, ``data.landingUrl``)."""
    if not is_template(text):
        return []
    if (count := placeholder_count(text)) > MAX_PLACEHOLDERS:
        return [TemplateProblem(field, None, f"{count} placeholders ('{{{{'); a message has "
                                             f"at most {MAX_PLACEHOLDERS}")]
    normalized = _normalized(text)
    if _usual_text_fine(normalized):
        return []
    return _PARSED.problems(field, normalized)


def checked_by_parser(field: str, normalized: str) -> list[TemplateProblem]:
    """:func:`check_text`'s answer from Jinja2's lexer and parser (``normalized``: its line
    breaks as Jinja2 reads them), for a text not in the usual shape."""
    placeholders, problems = _scan(field, normalized)
    for placeholder in placeholders:
        if len(problems) >= MAX_PROBLEMS:
            break
        problems.extend(_placeholder_problems(field, normalized, placeholder))
    return sorted(problems, key=lambda problem: problem.position.offset if problem.position else -1)


class _ParsedVerdicts:
    """The problems of the texts the parser checked lately, by text, at most ``max_chars``
    characters of them (the least recently asked forgotten first). A campaign's texts are
    checked more than once: the api checks a body off the event loop, then a follow-up or an
    edit checks the content it makes of it on the loop; the second check finds the first's
    verdict. Thread-safe: bodies are checked in worker threads."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self._verdicts: OrderedDict[str, tuple[TemplateProblem, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def problems(self, field: str, normalized: str) -> list[TemplateProblem]:
        with self._lock:
            known = self._verdicts.get(normalized)
            if known is not None:
                self._verdicts.move_to_end(normalized)
        if known is None:
            known = tuple(checked_by_parser("", normalized))
            self._remember(normalized, known)
        return [replace(problem, field=field) for problem in known]

    def _remember(self, normalized: str, problems: tuple[TemplateProblem, ...]) -> None:
        with self._lock:
            if normalized in self._verdicts or len(normalized) > self._max_chars:
                return
            self._verdicts[normalized] = problems
            self._chars += len(normalized)
            while self._chars > self._max_chars:
                forgotten, _ = self._verdicts.popitem(last=False)
                self._chars -= len(forgotten)


REMEMBERED_CHARS = 4 * 1024 * 1024
"""Characters of texts whose verdicts are remembered: ten of the largest campaigns."""
_PARSED = _ParsedVerdicts(REMEMBERED_CHARS)


# --- compiling and rendering -----------------------------------------------------------------------
class DeviceFields(Protocol):
    """What a placeholder may read of a device (``herald.domain.documents.Device`` has it)."""

    @property
    def user_id(self) -> str | None: ...
    @property
    def locale(self) -> str | None: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def platform(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


class CompiledText:
    """One text of a campaign, ready to render per device: plain text as it is, a template
    compiled once. ``attribute_names`` are the attributes its placeholders read."""

    __slots__ = ("_template", "attribute_names", "field", "text")

    def __init__(self, field: str, text: str) -> None:
        """Compile ``text``; :class:`TemplateRefused` with every problem if it is not valid."""
        self.field = field
        self.text = text
        self._template: Template | None = None
        self.attribute_names: frozenset[str] = frozenset()
        if is_template(text):
            problems = check_text(field, text)
            if problems:
                raise TemplateRefused(problems)
            normalized = _normalized(text)
            self._template = _ENVIRONMENT.from_string(normalized)
            self.attribute_names = _attributes_read(normalized)

    @property
    def personal(self) -> bool:
        """Whether the text differs between devices (it has placeholders)."""
        return self._template is not None

    def render(self, context: dict[str, Any]) -> str:
        """The text for one device (``context`` from :func:`device_context`); RenderFailed if
        Jinja2 refuses or the result is longer than :data:`MAX_RENDERED_CHARS`."""
        if self._template is None:
            return self.text
        template = self._template
        try:
            # Template.render, less its copy of the context into a dict merged with the globals
            # (there are none): a quarter of a render's CPU (timeit, 2026-11-24: 9.5 against
            # 12.8 µs for bench.personalize's body on a loaded machine).
            rendered = "".join(template.root_render_func(template.new_context(context, shared=True)))
        except TemplateError as exc:
            raise RenderFailed(f"{self.field} could not be rendered for this device: {exc}") from exc
        if len(rendered) > MAX_RENDERED_CHARS:
            raise RenderFailed(f"{self.field} rendered for this device is {len(rendered)} "
                               f"characters; Herald sends at most {MAX_RENDERED_CHARS}")
        return rendered


def _attributes_read(text: str) -> frozenset[str]:
    tree = _ENVIRONMENT.parse(text)
    return frozenset(node.attr for node in tree.find_all(nodes.Getattr))


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def device_context(device: DeviceFields, attribute_names: Collection[str]) -> dict[str, Any]:
    """What templates see of ``device``: its fields that are set, and of its attributes those
    named in ``attribute_names``, all as text. A field it lacks is absent (its default applies)."""
    fields = {"user_id": device.user_id, "locale": device.locale, "timezone": device.timezone,
              "platform": device.platform}
    context: dict[str, Any] = {name: value for name, value in fields.items() if value is not None}
    attributes = device.attributes
    context[ATTRIBUTES] = {name: _as_text(attributes[name]) for name in attribute_names
                           if attributes.get(name) is not None}
    return context
