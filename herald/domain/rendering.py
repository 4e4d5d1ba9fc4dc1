"""The message each device gets: the translation its locale selects, its placeholders filled in
from its own fields, as the FCM request body.

**Variants.** A campaign's own content (title, body, data) is one variant; each translation,
named by a language tag, is another. A translation has its own title and body, and may translate
some data values: its ``data`` names keys the campaign's data has, and the campaign's values
stand for the rest (a key the campaign lacks is refused: the app's data contract is one for
every language, and a misspelt key would otherwise add a field). The image and the options are
the campaign's in every variant. A device gets the variant :func:`herald.domain.locales.best_match`
picks for its locale, or the campaign's own content; the variant's tag (None for the campaign's
own) is what the audit records.

**Compiled once, rendered per device.** :func:`compile_content` compiles every text of every
variant once per campaign (:class:`~herald.domain.personalize.CompiledText`). A variant without
placeholders encodes its whole message once, like today's
:class:`~herald.domain.payload.MessageTemplate`, and a device costs it a token spliced into
bytes; a variant with placeholders pre-encodes everything but the notification and the data
(replacement key, options) and encodes those two per device.

**The moment of sending.** A TTL's APNs expiry (``apns-expiration``, an absolute epoch second) is
the one field that depends on when a request goes out, and a rendered message may wait long
before it does (a pause, a rollout's hold, a capped rate). So no body is dated when it is
compiled or rendered: the pre-encoded bytes are cut around the expiry's value, and each request's
value (its own moment + the TTL) is spliced in as it goes on the wire
(:class:`~herald.domain.payload.WireBody`).

**FCM's size rule.** At creation the size of a rendered message cannot be known: an attribute's
value is the device's. :func:`content_problems` holds each variant to the 4,096 bytes with its
texts *as written*, placeholders and all (``{{ attributes.first_name | default("there") }}``
counts 48 bytes of JSON). That is no bound, but it is the conservative reading of the usual case
(placeholder syntax is longer than a name or an id), it needs no invented sample values, and
the operator sees the number their own text makes. Then, at send, each personalised message is
measured as it is encoded (:meth:`CompiledContent.message_for`, the expiry counted at its
longest, as at creation); one over the limit fails that recipient alone, with the reason
:func:`size_problem` gives, and the campaign goes on. A variant without placeholders is exactly
what was measured at creation and is not measured again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from herald.domain.locales import LocaleMatcher, canonical_tag
from herald.domain.messages import ProfileNeed
from herald.domain.payload import (
    LONGEST_DEFAULT_KEY,
    MAX_PAYLOAD_BYTES,
    SIZED_EXPIRY_BYTES,
    SIZED_NOW_S,
    DataMap,
    MessageTemplate,
    PayloadTooLarge,
    SendOptions,
    WireBody,
    build_payload,
    expires_after_s,
    payload_size,
    split_at_expiry,
)
from herald.domain.personalize import (
    MAX_PLACEHOLDERS,
    CompiledText,
    DeviceFields,
    RenderFailed,
    TemplateProblem,
    TemplateRefused,
    check_text,
    device_context,
    placeholder_count,
)

MAX_TRANSLATIONS = 100
MAX_TITLE_CHARS = 1000
MAX_BODY_CHARS = 4000
DEFAULT_VARIANT = "default"
"""What the audit, a preview and the audience split call the campaign's own content."""


class Translation(BaseModel):
    """A campaign's words in one language (the tag is its key in ``translations``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)
    body: str = Field(min_length=1, max_length=MAX_BODY_CHARS)
    data: DataMap = Field(
        default_factory=dict,
        description="Translated data values, for keys the campaign's data has; the campaign's "
                    "values stand for the others")


def _canonical_tags(translations: dict[str, Translation]) -> dict[str, Translation]:
    canonical: dict[str, Translation] = {}
    for tag, translation in translations.items():
        key = canonical_tag(tag)
        if key in canonical:
            raise ValueError(f"two translations are both {key!r} (tags ignore case and '_')")
        canonical[key] = translation
    return canonical


Translations = Annotated[dict[str, Translation], Field(max_length=MAX_TRANSLATIONS),
                         AfterValidator(_canonical_tags)]
"""``{"es": {...}, "pt-BR": {...}}``: keys are language tags (BCP 47), stored canonical."""


# --- checked at creation ---------------------------------------------------------------------------
def content_problems(title: str, body: str, data: Mapping[str, str],
                     translations: Mapping[str, Translation], *, image_url: str | None = None,
                     options: SendOptions | None = None,
                     replace_key: str = LONGEST_DEFAULT_KEY) -> list[TemplateProblem]:
    """Everything that makes this content unsendable, for a 422: each placeholder problem with
    its field and position, each translation's tag or data key that is not one, and each
    variant over FCM's size rule with its texts as written (field ``content`` for the
    campaign's own, ``translations.<tag>`` for a translation). [] when it can be created.

    Sizes first: a variant over FCM's size rule, or with more than
    :data:`~herald.domain.personalize.MAX_PLACEHOLDERS` placeholders, is refused for that
    alone, before any template is lexed or parsed, so no text is parsed that could not be sent
    (a translation's data value of a megabyte cost 10 s of parsing before it was found too
    big)."""
    size = _size_problems("content", title, body, data, image_url, options, replace_key)
    size.extend(_count_problems("content", "", title, body, data))
    for tag, translation in translations.items():
        merged = {**data, **translation.data}
        size.extend(_size_problems(f"translations.{tag}", translation.title, translation.body,
                                   merged, image_url, options, replace_key))
        size.extend(_count_problems(f"translations.{tag}", f"translations.{tag}.",
                                    translation.title, translation.body, translation.data))
    if size:
        return size
    problems = _variant_problems("", title, body, data)
    for tag, translation in translations.items():
        problems.extend(_translation_problems(tag, translation, data))
    return problems


def _count_problems(variant: str, prefix: str, title: str, body: str,
                    data: Mapping[str, str]) -> list[TemplateProblem]:
    """A text with more placeholders than a message may have, named; else the variant, if its
    texts have more together."""
    counts = {f"{prefix}{field}": placeholder_count(text) for field, text in
              (("title", title), ("body", body), *((f"data.{k}", v) for k, v in data.items()))}
    too_many = [TemplateProblem(field, None, f"{count} placeholders ('{{{{'); a message has at "
                                             f"most {MAX_PLACEHOLDERS}")
                for field, count in counts.items() if count > MAX_PLACEHOLDERS]
    total = sum(counts.values())
    if too_many or total <= MAX_PLACEHOLDERS:
        return too_many
    return [TemplateProblem(variant, None, f"{total} placeholders ('{{{{') in one message; at "
                                           f"most {MAX_PLACEHOLDERS}")]


def _variant_problems(prefix: str, title: str, body: str,
                      data: Mapping[str, str]) -> list[TemplateProblem]:
    problems = check_text(f"{prefix}title", title) + check_text(f"{prefix}body", body)
    for key, value in data.items():
        problems.extend(check_text(f"{prefix}data.{key}", value))
    return problems


def _translation_problems(tag: str, translation: Translation,
                          data: Mapping[str, str]) -> list[TemplateProblem]:
    prefix = f"translations.{tag}."
    try:
        canonical_tag(tag)
    except ValueError as exc:
        return [TemplateProblem(prefix.rstrip("."), None, str(exc), kind="translation")]
    problems = _variant_problems(prefix, translation.title, translation.body, translation.data)
    problems.extend(
        TemplateProblem(f"{prefix}data.{key}", None,
                        f"the campaign's data has no key {key!r}: a translation translates the "
                        "campaign's data values and adds none", kind="translation")
        for key in translation.data if key not in data)
    return problems


def _size_problems(field: str, title: str, body: str, data: Mapping[str, str],
                   image_url: str | None, options: SendOptions | None,
                   replace_key: str) -> list[TemplateProblem]:
    payload = build_payload(title, body, dict(data), image_url, replace_key=replace_key,
                            options=options, now_s=SIZED_NOW_S)
    size = payload_size(payload)
    if size <= MAX_PAYLOAD_BYTES:
        return []
    return [TemplateProblem(field, None, f"{PayloadTooLarge(size)} (placeholders counted as "
                                         "written)", kind="size")]


def size_problem(size: int) -> str | None:
    """Why a message rendered for one device cannot be sent (``size`` bytes, counted as
    :func:`~herald.domain.payload.payload_size` counts), or None if FCM accepts its size."""
    if size <= MAX_PAYLOAD_BYTES:
        return None
    return (f"the message rendered for this device is {size} bytes; FCM accepts at most "
            f"{MAX_PAYLOAD_BYTES}")


# --- compiled per campaign, rendered per device ----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rendered:
    """A device's words: title, body and data, and the variant they came from (the
    translation's tag; None for the campaign's own content)."""

    title: str
    body: str
    data: dict[str, str]
    variant: str | None


MESSAGE_TOO_BIG = "MESSAGE_TOO_BIG"
"""The audit's error for a recipient whose rendered message is over FCM's 4,096 bytes."""
RENDER_FAILED = "RENDER_FAILED"
"""The audit's error for a recipient whose placeholders could not be rendered."""


@dataclass(frozen=True, slots=True)
class DeviceMessage:
    """What the sender sends one device: the FCM request ``body`` (its time-relative field
    filled when it is sent: :meth:`~herald.domain.payload.WireBody.at`), or why it cannot
    (``failure``, and ``code`` as the audit records it: that recipient fails, the campaign goes
    on); ``variant`` as in :class:`Rendered`."""

    variant: str | None
    body: WireBody | None = None
    failure: str | None = None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class _PayloadParts:
    """What every variant's message shares: :func:`build_payload`'s other arguments (its
    ``now_s`` is the moment of each request, not of compiling: the expiry is left open)."""

    image_url: str | None
    replace_key: str
    options: SendOptions | None

    def payload(self, title: str, body: str, data: dict[str, str]) -> dict[str, object]:
        return build_payload(title, body, data, self.image_url, replace_key=self.replace_key,
                             options=self.options, now_s=SIZED_NOW_S)

    @property
    def expires_after_s(self) -> int | None:
        return expires_after_s(self.options)


_HEAD = b'{"message":{"token":'


class _Variant:
    """One variant's compiled texts and its pre-encoded message parts."""

    __slots__ = ("_after", "_before", "_expires_after_s", "_expiry_bytes", "attribute_names",
                 "body", "data", "image", "personal", "tag", "template", "title")

    def __init__(self, tag: str | None, title: CompiledText, body: CompiledText,
                 data: dict[str, CompiledText], payload: _PayloadParts) -> None:
        self.tag, self.title, self.body, self.data = tag, title, body, data
        texts = (title, body, *data.values())
        self.personal = any(text.personal for text in texts)
        self.attribute_names = frozenset[str]().union(*(text.attribute_names for text in texts))
        self.image = payload.image_url
        self.template: MessageTemplate | None = None
        self._expires_after_s = payload.expires_after_s
        self._expiry_bytes = SIZED_EXPIRY_BYTES if self._expires_after_s else 0
        if self.personal:
            rest = payload.payload("", "", {})
            del rest["notification"]
            tail = b"," + orjson.dumps(rest)[1:] + b"}"
            self._before, self._after = split_at_expiry(tail) if self._expires_after_s \
                else (tail, b"")
        else:
            self.template = MessageTemplate(payload.payload(
                title.text, body.text, {key: text.text for key, text in data.items()}),
                self._expires_after_s)

    def render(self, device: DeviceFields) -> Rendered:
        context = device_context(device, self.attribute_names)
        data = {key: text.render(context) for key, text in self.data.items()}
        return Rendered(self.title.render(context), self.body.render(context), data, self.tag)

    def message_for(self, token: str, device: DeviceFields) -> DeviceMessage:
        if self.template is not None:
            return DeviceMessage(self.tag, self.template.wire_body_for(token))
        try:
            words = self.render(device)
        except RenderFailed as exc:
            return DeviceMessage(self.tag, failure=exc.reason, code=RENDER_FAILED)
        notification = {"title": words.title, "body": words.body}
        if self.image:
            notification["image"] = self.image
        fields = orjson.dumps({"notification": notification, "data": words.data} if words.data
                              else {"notification": notification})
        # one '}' and one ',' less; the expiry counted at its longest, as at creation
        failure = size_problem(len(fields) + len(self._before) + self._expiry_bytes
                               + len(self._after) - 2)
        if failure is not None:
            return DeviceMessage(self.tag, failure=failure, code=MESSAGE_TOO_BIG)
        before = _HEAD + orjson.dumps(token) + b"," + fields[1:-1] + self._before
        return DeviceMessage(self.tag, WireBody(before, self._after, self._expires_after_s))


class CompiledContent:
    """A campaign's content with its translations, compiled once: which variant a device gets,
    its words, and its FCM request body."""

    __slots__ = ("_matcher", "_variants")

    def __init__(self, variants: Mapping[str | None, _Variant]) -> None:
        self._variants = dict(variants)
        self._matcher = LocaleMatcher(tag for tag in variants if tag is not None)

    @property
    def personalized(self) -> bool:
        """Whether any variant has placeholders (messages then differ between devices)."""
        return any(variant.personal for variant in self._variants.values())

    @property
    def attribute_names(self) -> frozenset[str]:
        """The device attributes any variant reads: all a recipient needs to carry of its
        attributes (with its locale, user id, timezone and platform) for this campaign."""
        return frozenset[str]().union(*(v.attribute_names for v in self._variants.values()))

    @property
    def per_device(self) -> bool:
        """Whether devices get different messages (translations, or placeholders): then each
        recipient's message is made from its profile; else all share :attr:`shared`."""
        return len(self._variants) > 1 or self.personalized

    @property
    def shared(self) -> MessageTemplate | None:
        """The one message every device gets (its token spliced in), when not per device."""
        return None if self.per_device else self._variants[None].template

    @property
    def tags(self) -> tuple[str, ...]:
        """The translations' tags, canonical."""
        return tuple(tag for tag in self._variants if tag is not None)

    def variant_for(self, locale: str | None) -> str | None:
        """The tag of the translation a device in ``locale`` gets; None: the campaign's own."""
        return self._matcher.match(locale)

    def render(self, device: DeviceFields) -> Rendered:
        """``device``'s words (for a preview); RenderFailed if they cannot be rendered."""
        return self._variants[self._matcher.match(device.locale)].render(device)

    def message_for(self, token: str, device: DeviceFields) -> DeviceMessage:
        """The FCM request body for ``device`` at ``token`` (its expiry filled when it is
        sent), or the reason it fails alone: a field that cannot be rendered, or a message over
        FCM's size limit."""
        return self._variants[self._matcher.match(device.locale)].message_for(token, device)


def profile_need(title: str, body: str, data: Mapping[str, str],
                 translations: Mapping[str, Translation]) -> ProfileNeed | None:
    """What of each device this content's messages read (None: nothing, every device gets one
    message): the dispatcher copies that into the chunks."""
    compiled = compile_content(title, body, data, translations, replace_key=LONGEST_DEFAULT_KEY)
    return ProfileNeed(compiled.attribute_names) if compiled.per_device else None


def compile_content(title: str, body: str, data: Mapping[str, str],
                    translations: Mapping[str, Translation], *, image_url: str | None = None,
                    options: SendOptions | None = None, replace_key: str) -> CompiledContent:
    """Compile a campaign's content for sending (once per campaign and pod). ``replace_key``
    and ``options`` are :func:`~herald.domain.payload.build_payload`'s; the moment of sending,
    which dates a TTL's APNs expiry, is each request's own (:class:`~herald.domain.payload.WireBody`,
    :meth:`~herald.domain.payload.MessageTemplate.body_for`). Raises
    :class:`~herald.domain.personalize.TemplateRefused` if a text is not a valid template
    (:func:`content_problems` refuses such content at creation)."""
    parts = _PayloadParts(image_url, replace_key, options)
    variants: dict[str | None, _Variant] = {
        None: _compile_variant(None, "", title, body, data, parts)}
    for tag, translation in translations.items():
        variants[tag] = _compile_variant(tag, f"translations.{tag}.", translation.title,
                                         translation.body, {**data, **translation.data}, parts)
    return CompiledContent(variants)


def _compile_variant(tag: str | None, prefix: str, title: str, body: str,
                     data: Mapping[str, str], parts: _PayloadParts) -> _Variant:
    compiled: list[CompiledText] = []
    problems: list[TemplateProblem] = []
    for field, text in (("title", title), ("body", body),
                        *((f"data.{key}", value) for key, value in data.items())):
        try:
            compiled.append(CompiledText(prefix + field, text))
        except TemplateRefused as exc:
            problems.extend(exc.problems)
    if problems:
        raise TemplateRefused(problems)
    title_text, body_text, *data_texts = compiled
    return _Variant(tag, title_text, body_text, dict(zip(data, data_texts, strict=True)), parts)

