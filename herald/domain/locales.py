"""Language tags (BCP 47) and the choice of a campaign's translation for a device's locale.

**Tags.** A translation is named by a language tag as RFC 5646 §2.1 defines its syntax:
``language[-script][-region]*(-variant)*(-extension)[-x-private]``, e.g. ``es``, ``pt-BR``,
``zh-Hant-TW``, ``es-419``, ``sr-Latn``. Herald accepts any case and ``_`` for ``-`` (Android and
Java write ``pt_BR``) and keeps the canonical case of RFC 5646 §2.1.1: language lowercase, script
titlecase, region uppercase (``zh-hant-tw`` → ``zh-Hant-TW``). A tag is checked for being
well-formed, not against the IANA registry: ``xx-YY`` is accepted and simply never matches a
device. The language must be 2 or 3 letters (ISO 639); RFC 5646's reserved 4-letter and registered
5 to 8 letter languages, grandfathered tags and private-use-only tags (``x-klingon``) are refused:
none names a language an app ships.

**Length.** A tag is at most 35 characters (:data:`MAX_TAG_CHARS`), a campaign's tag and a
device's locale alike: RFC 5646 §4.4.1 asks every implementation to handle that many, and no
language an app ships needs more (``zh-Hant-TW`` is 10).

**Matching.** RFC 4647 §3.4 "Lookup": the device's locale is the language range; the most
specific available tag equal to it wins, else the range is truncated one subtag at a time from
the end (a singleton such as ``x`` or ``u`` left at the end goes with the subtag after it) and
tried again: ``zh-Hant-TW`` tries ``zh-Hant-TW``, ``zh-Hant``, ``zh``. Matching ignores case
(RFC 4647 §2). Lookup never answers a longer or a sibling tag: a device in ``es`` does not get
``es-MX``, nor a device in ``es-AR`` ``es-MX``; when nothing matches, the campaign's own content
is RFC 4647's "default" (§3.4.1). Lookup knows no likely subtags (CLDR): a device that says
``zh-TW`` does not get ``zh-Hant``; a campaign that wants both names both.

A small implementation rather than ``langcodes`` (well kept, but it brings ``language-data``,
the names and likely subtags of every language, none of which Herald uses): RFC 5646's syntax is
one regular expression and RFC 4647's lookup a truncation loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator, Field

MAX_TAG_CHARS = 35
"""RFC 5646 §4.4.1's minimum buffer for a tag; longer than any tag an app uses."""

_ALNUM = "[a-z0-9]"
_TAG = re.compile(
    rf"""
    [a-z]{{2,3}}(?:-[a-z]{{3}}){{0,3}}                 # language, extended language subtags
    (?:-[a-z]{{4}})?                                  # script
    (?:-(?:[a-z]{{2}}|[0-9]{{3}}))?                   # region
    (?:-(?:{_ALNUM}{{5,8}}|[0-9]{_ALNUM}{{3}}))*      # variants
    (?:-[a-wyz0-9](?:-{_ALNUM}{{2,8}})+)*             # extensions: a singleton other than x
    (?:-x(?:-{_ALNUM}{{1,8}})+)?                      # private use
    """,
    re.VERBOSE,
)
"""RFC 5646 §2.1's ``langtag`` production, over a lowercased tag (case is not significant)."""


def canonical_tag(tag: str) -> str:
    """``tag`` in RFC 5646's canonical case with ``-`` separators; ValueError if ``tag`` is not
    a well-formed language tag."""
    lowered = tag[:MAX_TAG_CHARS + 1].replace("_", "-").lower()
    if len(lowered) > MAX_TAG_CHARS or not _TAG.fullmatch(lowered):
        raise ValueError(
            f"{tag!r} is not a language tag (BCP 47) such as 'es', 'pt-BR' or 'zh-Hant-TW'")
    return "-".join(_canonical_case(lowered.split("-")))


def _canonical_case(subtags: list[str]) -> Iterable[str]:
    """RFC 5646 §2.1.1: after the language and before any singleton, a 4-letter subtag is a
    script (titlecase) and a 2-letter one a region (uppercase); everything else lowercase."""
    yield subtags[0]
    after_singleton = False
    for subtag in subtags[1:]:
        after_singleton = after_singleton or len(subtag) == 1
        if not after_singleton and len(subtag) == 4 and subtag.isalpha():
            yield subtag.title()
        elif not after_singleton and len(subtag) == 2:
            yield subtag.upper()
        else:
            yield subtag


LanguageTag = Annotated[str, Field(min_length=2, max_length=MAX_TAG_CHARS),
                        AfterValidator(canonical_tag)]
"""A language tag (BCP 47) in any case, with ``-`` or ``_``; validated and stored canonical."""


_SUBTAG = re.compile(r"[^-_]+")


def lookup_ranges(device_locale: str) -> list[str]:
    """The ranges RFC 4647 lookup tries for ``device_locale``, most specific first, lowercase:
    ``zh_Hant_TW`` → ``["zh-hant-tw", "zh-hant", "zh"]``. Tolerant: a locale that is not a
    well-formed tag is still truncated the same way (it can only match a tag equal to a prefix).

    Linear, and short whatever the locale's length (a device registered before locales were
    bounded may hold 60 KB): a range longer than :data:`MAX_TAG_CHARS` equals no tag, so the
    subtags are read lazily until the ranges would be longer, and at most 18 ranges of at most
    35 characters are made."""
    subtags: list[str] = []
    length = -1
    for subtag in _SUBTAG.finditer(device_locale):
        length += len(subtag.group()) + 1
        if length > MAX_TAG_CHARS:
            break
        subtags.append(subtag.group().lower())
    return ["-".join(subtags[:end]) for end in range(len(subtags), 0, -1)
            if len(subtags[end - 1]) > 1]


def best_match(device_locale: str | None, available: Iterable[str]) -> str | None:
    """The tag of ``available`` that RFC 4647 lookup picks for ``device_locale``, as it is
    spelled in ``available``; None when none matches (the campaign's own content)."""
    if not device_locale:
        return None
    by_range = {tag.replace("_", "-").lower(): tag for tag in available}
    return next((by_range[r] for r in lookup_ranges(device_locale) if r in by_range), None)


class LocaleMatcher:
    """:func:`best_match` over one campaign's tags, remembered per device locale: a campaign's
    recipients share a few dozen locales, so the sender computes each one once."""

    MAX_REMEMBERED = 4096
    """Locales remembered; beyond that (a device population with thousands of distinct
    locales) each further one is computed every time rather than growing without bound. A
    locale longer than a tag can be (registered before locales were bounded) is never
    remembered: 4,096 of them would otherwise keep their every character."""

    __slots__ = ("_available", "_known")

    def __init__(self, available: Iterable[str]) -> None:
        self._available = tuple(available)
        self._known: dict[str | None, str | None] = {}

    def match(self, device_locale: str | None) -> str | None:
        """The tag for ``device_locale``, or None for the campaign's own content."""
        try:
            return self._known[device_locale]
        except KeyError:
            tag = best_match(device_locale, self._available)
            if len(self._known) < self.MAX_REMEMBERED and (
                    device_locale is None or len(device_locale) <= MAX_TAG_CHARS):
                self._known[device_locale] = tag
            return tag
