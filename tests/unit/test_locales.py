"""Language tags and the choice of a translation for a device's locale (herald/domain/locales.py):
RFC 5646's syntax and canonical case, RFC 4647's lookup (exact, then shorter prefixes, never a
longer or a sibling tag, the campaign's own content when nothing matches)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from pydantic import TypeAdapter, ValidationError

from herald.domain.locales import (
    MAX_TAG_CHARS,
    LanguageTag,
    LocaleMatcher,
    best_match,
    canonical_tag,
    lookup_ranges,
)

TAGS = TypeAdapter(LanguageTag)


# --- tags ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("es", "es"),
        ("ES", "es"),
        ("pt-br", "pt-BR"),
        ("PT_br", "pt-BR"),
        ("zh-hant-tw", "zh-Hant-TW"),
        ("ZH_HANT_TW", "zh-Hant-TW"),
        ("sr-latn", "sr-Latn"),
        ("es-419", "es-419"),
        ("de-ch-1996", "de-CH-1996"),
        ("zh-yue-hk", "zh-yue-HK"),
        # after a singleton everything is lowercase (RFC 5646 §2.1.1), even what looks like a region
        ("en-US-x-twain", "en-US-x-twain"),
        ("en-a-bb-x-ab", "en-a-bb-x-ab"),
    ],
)
def test_tags_are_accepted_in_any_case_and_stored_canonical(written: str, canonical: str) -> None:
    assert canonical_tag(written) == canonical
    assert TAGS.validate_python(written) == canonical


@pytest.mark.parametrize(
    "written",
    ["", "e", "english", "abcd", "x-klingon", "i-klingon", "en--US", "en-US-", "-en", "en US",
     "en-toolongsubtag", "en-US-u", "es-MX-a", "en-US-x", "zh-Hant-" + "a" * 60],
)
def test_what_is_not_a_language_tag_is_refused(written: str) -> None:
    with pytest.raises(ValueError, match="is not a language tag"):
        canonical_tag(written)
    with pytest.raises(ValidationError):
        TAGS.validate_python(written)


# --- lookup ----------------------------------------------------------------------------------------
AVAILABLE = ["es", "es-MX", "pt-BR", "zh-Hant", "zh"]


@pytest.mark.parametrize(
    ("device_locale", "chosen"),
    [
        ("es-MX", "es-MX"),  # exact
        ("es", "es"),
        ("es-AR", "es"),  # language only: a sibling region is never chosen
        ("es-419", "es"),
        ("pt-BR", "pt-BR"),
        ("zh-Hant-TW", "zh-Hant"),  # one subtag shorter
        ("zh-Hans-CN", "zh"),  # two shorter
        ("zh-TW", "zh"),  # no likely subtags: zh-TW is not taken for zh-Hant
        ("es-MX-x-custom", "es-MX"),  # the singleton goes with its subtag
    ],
)
def test_the_most_specific_available_tag_that_prefixes_the_locale_is_chosen(
        device_locale: str, chosen: str) -> None:
    assert best_match(device_locale, AVAILABLE) == chosen


@pytest.mark.parametrize("device_locale", ["pt", "pt-PT", "fr", "fr-FR", "en", None, ""])
def test_a_locale_with_no_match_gets_the_campaigns_own_content(device_locale: str | None) -> None:
    assert best_match(device_locale, AVAILABLE) is None


def test_a_longer_tag_is_never_chosen_for_a_shorter_locale() -> None:
    assert best_match("es", ["es-MX"]) is None
    assert best_match("zh-Hant", ["zh-Hant-TW"]) is None


@pytest.mark.parametrize("device_locale", ["ES-mx", "es_MX", "es_mx", "eS-Mx"])
def test_matching_ignores_case_and_takes_underscores(device_locale: str) -> None:
    assert best_match(device_locale, AVAILABLE) == "es-MX"


def test_the_tag_is_answered_as_the_campaign_spells_it() -> None:
    assert best_match("pt-br", ["pt-BR"]) == "pt-BR"
    assert best_match("zh-hant-tw", ["zh-Hant"]) == "zh-Hant"


def test_lookup_truncates_one_subtag_at_a_time_and_drops_a_trailing_singleton() -> None:
    """RFC 4647 §3.4's example: zh-Hant-CN-x-private1-private2."""
    assert lookup_ranges("zh-Hant-CN-x-private1-private2") == [
        "zh-hant-cn-x-private1-private2", "zh-hant-cn-x-private1", "zh-hant-cn", "zh-hant", "zh"]


def test_the_matcher_answers_as_best_match_and_remembers_each_locale() -> None:
    matcher = LocaleMatcher(AVAILABLE)
    for locale in ["es-MX", "es-AR", "fr", None, "zh-Hant-TW", "es-AR"]:
        assert matcher.match(locale) == best_match(locale, AVAILABLE)


def test_the_matcher_stops_remembering_but_still_answers_past_its_bound() -> None:
    matcher = LocaleMatcher(["es"])
    locales = [f"es-x-v{i}" for i in range(LocaleMatcher.MAX_REMEMBERED + 10)]
    assert all(matcher.match(locale) == "es" for locale in locales)
    assert matcher.match("fr") is None
    assert len(matcher._known) == LocaleMatcher.MAX_REMEMBERED


# --- bounded (issue 31) ----------------------------------------------------------------------------
def test_a_tag_is_at_most_35_characters() -> None:
    longest = "zh-Hant-TW-" + "-".join(["abcdefgh"] * 2) + "-abcdef"
    assert (len(longest), canonical_tag(longest)) == (35, "zh-Hant-TW-abcdefgh-abcdefgh-abcdef")
    with pytest.raises(ValueError, match="is not a language tag"):
        canonical_tag(longest + "g")
    with pytest.raises(ValidationError, match="at most 35 characters"):
        TAGS.validate_python(longest + "g")


def _per_call_us(call: Callable[[], object], calls: int = 2000) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def test_a_35_character_locale_is_looked_up_in_microseconds() -> None:
    """Measured on 2026-11-27 (2 cores, load average 8 to 10): 6 µs a lookup. The bound
    leaves room for a loaded machine; quadratic code on a 60 KB locale took 2.9 s."""
    locale = "zh-Hant-TW-" + "-".join(["abcdefgh"] * 2) + "-abcdef"
    per_call_us = _per_call_us(lambda: best_match(locale, AVAILABLE))
    print(f"\nlookup of a {len(locale)}-character locale: {per_call_us:.1f} µs")
    assert best_match(locale, AVAILABLE) == "zh-Hant"
    assert per_call_us < 200


@pytest.mark.parametrize("locale", [
    "es-" + "a" * 60_000,  # one huge subtag
    "es-MX-" + "ab-" * 20_000,  # twenty thousand subtags
    "es" + "-" * 60_000 + "MX",  # separators only
])
def test_a_60_kb_locale_stored_before_the_bound_costs_what_a_short_one_does(locale: str) -> None:
    """A device registered before locales were bounded may hold one: lookup reads it lazily and
    makes ranges of at most 35 characters (the eager version made every prefix: 2.9 s and
    570 MB for 60 KB)."""
    ranges = lookup_ranges(locale)
    assert all(len(each) <= MAX_TAG_CHARS for each in ranges)
    assert ranges[-1] == "es"
    per_call_us = _per_call_us(lambda: best_match(locale, AVAILABLE), calls=50)
    print(f"\nlookup of a {len(locale):,}-character locale: {per_call_us:.0f} µs")
    assert best_match(locale, AVAILABLE) in ("es", "es-MX")
    assert per_call_us < 5_000  # linear: a scan of 60 KB by a regular expression


def test_the_matcher_never_remembers_a_locale_longer_than_a_tag() -> None:
    matcher = LocaleMatcher(["es"])
    assert matcher.match("es-" + "a" * 60_000) == "es"
    assert matcher.match("es-MX") == "es"
    assert list(matcher._known) == ["es-MX"]
