"""Language tags and the choice of a translation for a device's locale (herald/domain/locales.py):
RFC 5646's syntax and canonical case, RFC 4647's lookup (exact, then shorter prefixes, never a
longer or a sibling tag, the campaign's own content when nothing matches)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from herald.domain.locales import (
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
