"""Purpose (herald/domain/purpose.py): which devices a marketing, transactional or legacy
campaign may reach, evaluated as the fakes do (``Audience.admits``) and as MongoDB would
(``audience_filter``), and the contracts' 422 for an audience a purpose leaves empty."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from herald.adapters.devices import audience_filter
from herald.contracts.http import AudienceEstimateRequest, CampaignCreate, CampaignTemplate
from herald.domain.audience import Audience
from herald.domain.documents import Campaign, CampaignContent, Device
from herald.domain.purpose import (
    Purpose,
    PurposeConflict,
    PurposeNarrows,
    follow_up_purpose,
    reach,
)
from herald.domain.status import Status
from herald.service_layer.scheduling import stored_template, template_purpose

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def device(*, push: bool, marketing: bool) -> Device:
    return Device(id=f"d-{push}-{marketing}", token="t", platform="android", created_at=NOW,
                  updated_at=NOW, push_enabled=push, marketing_enabled=marketing)


FLEET = [device(push=push, marketing=marketing)
         for push in (True, False) for marketing in (True, False)]


def reached(audience: Audience, purpose: Purpose | None) -> set[tuple[bool, bool]]:
    narrowed = reach(audience, purpose)
    return {(d.push_enabled, d.marketing_enabled) for d in FLEET if narrowed.admits(d)}


def test_marketing_reaches_only_opted_in_devices_whatever_the_audience_says() -> None:
    assert reached(Audience(), Purpose.MARKETING) == {(True, True)}
    assert reached(Audience(push_enabled=None), Purpose.MARKETING) == {(True, True)}
    assert audience_filter(reach(Audience(), Purpose.MARKETING)) == {
        "invalid": False, "push_enabled": True, "marketing_enabled": True}


def test_transactional_ignores_the_marketing_flag_but_never_reaches_push_disabled() -> None:
    assert reached(Audience(), Purpose.TRANSACTIONAL) == {(True, True), (True, False)}
    assert reached(Audience(push_enabled=None), Purpose.TRANSACTIONAL) == {
        (True, True), (True, False)}
    assert audience_filter(reach(Audience(push_enabled=None), Purpose.TRANSACTIONAL)) == {
        "invalid": False, "push_enabled": True}


def test_a_legacy_campaign_reaches_what_its_audience_says() -> None:
    assert reached(Audience(push_enabled=None), None) == {
        (True, True), (True, False), (False, True), (False, False)}
    assert reach(Audience(marketing_enabled=False), None) == Audience(marketing_enabled=False)


@pytest.mark.parametrize(("audience", "purpose", "field"), [
    (Audience(marketing_enabled=False), Purpose.MARKETING, "marketing_enabled"),
    (Audience(push_enabled=False), Purpose.MARKETING, "push_enabled"),
    (Audience(push_enabled=False), Purpose.TRANSACTIONAL, "push_enabled"),
])
def test_an_audience_the_purpose_leaves_empty_is_a_conflict(
        audience: Audience, purpose: Purpose, field: str) -> None:
    with pytest.raises(PurposeConflict, match=f"audience.{field}"):
        reach(audience, purpose)


def test_a_create_or_estimate_that_would_reach_nobody_is_refused_naming_the_field() -> None:
    body = {"title": "t", "body": "b", "audience": {"marketing_enabled": False}}
    with pytest.raises(ValidationError, match=r"audience\.marketing_enabled"):
        CampaignCreate.model_validate(body)
    with pytest.raises(ValidationError, match=r"audience\.marketing_enabled"):
        AudienceEstimateRequest.model_validate({"audience": {"marketing_enabled": False}})
    assert CampaignCreate.model_validate({**body, "purpose": "transactional"}).purpose \
        is Purpose.TRANSACTIONAL


def test_new_campaigns_and_estimates_default_to_marketing() -> None:
    assert CampaignCreate(title="t", body="b").purpose is Purpose.MARKETING
    assert AudienceEstimateRequest().purpose is Purpose.MARKETING


def test_a_schedule_template_stored_before_purposes_runs_as_its_audience_says() -> None:
    stored = {"title": "t", "body": "b", "audience": {"marketing_enabled": False}}
    assert template_purpose(stored) is None
    assert stored_template(stored).audience == Audience(marketing_enabled=False)
    named = CampaignTemplate(title="t", body="b").model_dump(mode="json")
    assert template_purpose(named) is Purpose.MARKETING


def test_a_campaign_reaches_its_audience_through_its_purpose() -> None:
    campaign = Campaign(id="c" * 24, status=Status.PENDING,
                        content=CampaignContent(title="t", body="b"), created_at=NOW,
                        updated_at=NOW, due_at=NOW, audience=Audience(),
                        purpose=Purpose.MARKETING)
    assert campaign.reach == Audience(marketing_enabled=True)
    assert Campaign(**{**_fields(campaign), "purpose": None}).reach == Audience()
    assert Campaign(**{**_fields(campaign), "audience": None}).reach is None


def _fields(campaign: Campaign) -> dict[str, object]:
    return {name: getattr(campaign, name) for name in Campaign.__dataclass_fields__}


def test_a_follow_up_keeps_its_originals_purpose_unless_asked() -> None:
    marketing = reach(Audience(), Purpose.MARKETING)
    assert follow_up_purpose(None, Purpose.MARKETING, marketing) is Purpose.MARKETING
    assert follow_up_purpose(Purpose.TRANSACTIONAL, Purpose.MARKETING, marketing) \
        is Purpose.TRANSACTIONAL
    assert follow_up_purpose(None, None, Audience()) is None


@pytest.mark.parametrize(("original", "original_reach"), [
    (Purpose.TRANSACTIONAL, reach(Audience(), Purpose.TRANSACTIONAL)),
    (None, Audience()),
    (Purpose.TRANSACTIONAL, None),
])
def test_a_marketing_follow_up_of_recipients_not_chosen_by_consent_is_refused(
        original: Purpose | None, original_reach: Audience | None) -> None:
    with pytest.raises(PurposeNarrows, match="marketing_enabled"):
        follow_up_purpose(Purpose.MARKETING, original, original_reach)


def test_a_legacy_original_that_asked_for_consent_may_have_a_marketing_follow_up() -> None:
    assert follow_up_purpose(Purpose.MARKETING, None, Audience(marketing_enabled=True)) \
        is Purpose.MARKETING
