"""Audience filters (herald/domain/audience.py) and their translation into a MongoDB query by
the device adapter (``herald.adapters.devices.audience_filter``, pure: no server needed).

The translation is the only place where user input becomes a query, so most tests here are about
what must *not* get through: operator names in keys, operator objects in values. Which devices an
audience admits is the store contract's (``tests/unit/store_contract.py``), run against the fake
(which asks ``Audience.admits``) and against MongoDB (which runs this translation).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from herald.adapters.devices import audience_filter
from herald.domain.audience import MAX_AUDIENCE_USER_IDS, AttributeFilter, Audience, Platform


def query_for(**fields: Any) -> dict[str, Any]:
    return audience_filter(Audience.model_validate(fields))


def test_default_audience_is_every_valid_device_with_push_enabled() -> None:
    assert audience_filter(Audience()) == {"invalid": False, "push_enabled": True}


def test_push_enabled_none_drops_the_condition_but_never_the_invalid_one() -> None:
    assert query_for(push_enabled=None) == {"invalid": False}


def test_push_disabled_devices_can_be_targeted_explicitly() -> None:
    assert query_for(push_enabled=False) == {"invalid": False, "push_enabled": False}


@pytest.mark.parametrize("value", [True, False])
def test_marketing_enabled_maps_to_its_field(value: bool) -> None:
    assert query_for(marketing_enabled=value)["marketing_enabled"] is value


@pytest.mark.parametrize(
    ("field", "values", "query_field"),
    [
        ("platforms", ["android", "ios"], "platform"),
        ("topics", ["news", "sports.kr"], "topics"),
        ("user_ids", ["u1", "u2"], "user_id"),
        ("locales", ["ko-KR", "en"], "locale"),
    ],
)
def test_membership_filters_map_to_in_on_the_device_field(field: str, values: list[str],
                                                          query_field: str) -> None:
    query = query_for(**{field: values})
    assert query[query_field] == {"$in": values}
    assert query["invalid"] is False
    assert query["push_enabled"] is True


def test_platforms_are_plain_strings_in_the_query() -> None:
    query = query_for(platforms=[Platform.WEB])
    assert query["platform"] == {"$in": ["web"]}
    assert all(type(v) is str for v in query["platform"]["$in"])


def test_filters_combine_as_conjunction() -> None:
    query = query_for(platforms=["ios"], topics=["news"], marketing_enabled=True,
                      attributes={"tier": {"eq": "gold"}})
    assert query == {
        "invalid": False,
        "push_enabled": True,
        "marketing_enabled": True,
        "platform": {"$in": ["ios"]},
        "topics": {"$in": ["news"]},
        "attributes.tier": "gold",
    }


# --- attribute filters -----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["gold", 3, 2.5, True, False, 0, ""])
def test_attribute_eq_is_a_plain_equality(value: object) -> None:
    condition = query_for(attributes={"tier": {"eq": value}})["attributes.tier"]
    assert condition == value
    assert type(condition) is type(value)  # True stays a bool, 0 an int: BSON tells them apart


def test_attribute_in_builds_in_operator() -> None:
    query = query_for(attributes={"tier": {"in": ["gold", "silver"]}})
    assert query["attributes.tier"] == {"$in": ["gold", "silver"]}


@pytest.mark.parametrize(
    ("spec", "condition"),
    [
        ({"gt": 1}, {"$gt": 1}),
        ({"gte": 1}, {"$gte": 1}),
        ({"lt": 10}, {"$lt": 10}),
        ({"lte": 10}, {"$lte": 10}),
        ({"gte": 18, "lt": 65}, {"$gte": 18, "$lt": 65}),
        ({"gt": 0}, {"$gt": 0}),
        ({"gte": "2026-01-01", "lte": "2026-12-31"}, {"$gte": "2026-01-01", "$lte": "2026-12-31"}),
    ],
)
def test_attribute_ranges_build_comparison_operators(spec: dict[str, Any],
                                                     condition: dict[str, Any]) -> None:
    assert query_for(attributes={"age": spec})["attributes.age"] == condition


def test_several_attributes_each_get_their_own_dotted_field() -> None:
    query = query_for(attributes={"age": {"gte": 18}, "country": {"in": ["KR", "JP"]}})
    assert query["attributes.age"] == {"$gte": 18}
    assert query["attributes.country"] == {"$in": ["KR", "JP"]}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"eq": 1, "in": [1]},
        {"eq": 1, "gt": 0},
        {"in": [1], "lte": 3},
        {"eq": None},
    ],
    ids=["none", "eq+in", "eq+range", "in+range", "eq-null"],
)
def test_attribute_filter_needs_exactly_one_kind(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        AttributeFilter.model_validate(spec)


def test_attribute_in_must_not_be_empty() -> None:
    with pytest.raises(ValidationError):
        AttributeFilter.model_validate({"in": []})


@pytest.mark.parametrize(
    "name",
    ["$where", "a$b", "profile.age", "a.b.c", "$gt", "", "1abc", "_x", "a b", "a" * 65],
)
def test_attribute_names_that_could_become_operators_or_paths_are_rejected(name: str) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"attributes": {name: {"eq": 1}}})


@pytest.mark.parametrize("name", ["a", "tier", "appVersion", "last_seen_days", "A" * 64])
def test_plain_attribute_names_are_accepted(name: str) -> None:
    assert f"attributes.{name}" in query_for(attributes={name: {"eq": 1}})


@pytest.mark.parametrize(
    "spec",
    [
        {"eq": {"$gt": 1}},
        {"eq": {"$where": "sleep(1000)"}},
        {"eq": {"$ne": None}},
        {"in": [{"$gt": 1}]},
        {"in": [{"$where": "this.x"}]},
        {"gt": {"$where": "1"}},
        {"lte": {"$gt": ""}},
        {"eq": [1, 2]},
        {"gte": [1]},
        {"in": [[1]]},
    ],
)
def test_operator_objects_and_lists_are_rejected_as_values(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"attributes": {"tier": spec}})


@pytest.mark.parametrize("spec", [{"$gt": 1}, {"$where": "1"}, {"ne": 1}, {"regex": ".*"}])
def test_unknown_filter_operators_are_rejected(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AttributeFilter.model_validate(spec)


@pytest.mark.parametrize("field", ["invalid", "$where", "country", "platform"])
def test_unknown_audience_fields_are_rejected(field: str) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({field: True})


def test_attribute_value_is_never_an_object_in_the_query() -> None:
    """Whatever passes validation, the condition is a scalar or an operator dict Herald built."""
    built = {"$in", "$gt", "$gte", "$lt", "$lte"}
    for spec in ({"eq": "x"}, {"in": ["a", 1]}, {"gt": 1, "lte": 5}):
        condition = query_for(attributes={"k": spec})["attributes.k"]
        if isinstance(condition, dict):
            assert set(condition) <= built
            values = condition.get("$in", list(condition.values()))
            assert all(not isinstance(v, dict | list) for v in values)


# --- platforms, sizes -------------------------------------------------------------------------------
@pytest.mark.parametrize("platform", ["android", "ios", "web"])
def test_known_platforms_are_accepted(platform: str) -> None:
    assert Audience.model_validate({"platforms": [platform]}).platforms == [Platform(platform)]


@pytest.mark.parametrize("platform", ["windows", "Android", "IOS", "", "huawei"])
def test_other_platforms_are_rejected(platform: str) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"platforms": [platform]})


@pytest.mark.parametrize("field", ["platforms", "topics", "user_ids", "locales"])
def test_membership_lists_must_not_be_empty(field: str) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({field: []})


def test_user_ids_accepts_two_thousand() -> None:
    ids = [f"u{i}" for i in range(MAX_AUDIENCE_USER_IDS)]
    assert MAX_AUDIENCE_USER_IDS == 2000
    assert query_for(user_ids=ids)["user_id"] == {"$in": ids}


def test_user_ids_rejects_more_than_two_thousand() -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"user_ids": [f"u{i}" for i in range(2001)]})


def test_an_audience_compares_with_at_most_a_thousand_values_in_all() -> None:
    half = [f"v{i}" for i in range(500)]
    Audience.model_validate({"attributes": {"a": {"in": half}, "b": {"in": half}}})
    with pytest.raises(ValidationError, match="1001 values in all"):
        Audience.model_validate({"attributes": {"a": {"in": half}, "b": {"in": [*half, "x"]}}})


@pytest.mark.parametrize("condition", [{"eq": "x" * 257}, {"in": ["x" * 257]},
                                       {"gte": "x" * 257}])
def test_a_conditions_text_is_at_most_256_characters(condition: dict[str, Any]) -> None:
    Audience.model_validate({"attributes": {"a": {k: (["x" * 256] if k == "in" else "x" * 256)
                                                  for k in condition}}})
    with pytest.raises(ValidationError, match="at most 256 characters"):
        Audience.model_validate({"attributes": {"a": condition}})


def test_each_platform_at_most_once_in_number() -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"platforms": ["ios"] * 4})


def test_a_locale_condition_is_at_most_35_characters() -> None:
    Audience.model_validate({"locales": ["zh-Hant-TW-" + "abcdefgh-" * 2 + "abcdef"]})
    with pytest.raises(ValidationError, match="at most 35 characters"):
        Audience.model_validate({"locales": ["es-" + "-".join(["abcdefgh"] * 4)]})


def test_at_most_twenty_attribute_filters() -> None:
    twenty = {f"a{i}": {"eq": i} for i in range(20)}
    Audience.model_validate({"attributes": twenty})
    with pytest.raises(ValidationError):
        Audience.model_validate({"attributes": {**twenty, "a20": {"eq": 20}}})


@pytest.mark.parametrize("topic", ["has space", "a$b", "a/b", ""])
def test_topics_outside_fcm_alphabet_are_rejected(topic: str) -> None:
    with pytest.raises(ValidationError):
        Audience.model_validate({"topics": [topic]})


def test_audience_is_immutable() -> None:
    audience = Audience()
    with pytest.raises(ValidationError):
        audience.push_enabled = False  # type: ignore[misc]
