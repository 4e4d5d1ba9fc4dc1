"""Issue 25 with separate processes and the FCM emulator (which checks every body against
Google's discovery document): each device gets its language and its name, the preview is what
it then receives, a message rendered over 4 KB fails that recipient alone, the audit names each
recipient's variant, and a correction re-renders for each device."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient, Received
from herald.domain.access import masked_token
from herald_cli import commands as cli
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices

NAME = '{{ attributes.first_name | default("%s") }}'
CONTENT: dict[str, Any] = {
    "title": "Hey " + NAME % "you", "body": "We are live",
    "data": {"landingUrl": "https://example.com/live?u={{ user_id | default('') | urlencode }}"},
    "translations": {
        "es-MX": {"title": "¡Qué onda " + NAME % "cuate" + "!", "body": "En vivo ya"},
        "es": {"title": "Hola " + NAME % "amigo", "body": "Estamos en directo"},
        "en": {"title": "Hi " + NAME % "there", "body": "Live now",
               "data": {"landingUrl": "https://example.com/en"}}}}
LOCALES = {"es-MX": "es-MX", "es": "es", "en-US": "en", "fr": "default"}
"""A device's locale → the variant it must get (fr has no translation: the campaign's own)."""
GREETINGS = {"es-MX": ("¡Qué onda {}!", "cuate"), "es": ("Hola {}", "amigo"),
             "en": ("Hi {}", "there"), "default": ("Hey {}", "you")}
BODIES = {"es-MX": "En vivo ya", "es": "Estamos en directo", "en": "Live now",
          "default": "We are live"}
PER_KIND = 3
TOO_BIG = "\N{MATHEMATICAL DOUBLE-STRUCK CAPITAL A}" * 1024
"""A first name that makes the title and body over 4,096 bytes together (the correction's): the
longest attribute text a device may hold (1,024 characters), each of 4 bytes in UTF-8."""


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _population() -> tuple[list[dict[str, Any]], dict[str, tuple[str, str | None]]]:
    """Devices in each locale, with and without a first name; token prefix → (locale, name)."""
    base = reachable_devices(len(LOCALES) * 2 * PER_KIND)
    kinds = [(locale, name) for locale in LOCALES for name in (f"N{locale}", None)]
    devices, expected = [], {}
    for index, device in enumerate(base):
        locale, name = kinds[index % len(kinds)]
        name = f"{name}{index}" if name else None
        devices.append({**device, "locale": locale,
                        "attributes": {"first_name": name} if name else {}})
        expected[device["token"]] = (locale, name)
    return devices, expected


def _expected_words(locale: str, name: str | None) -> tuple[str, str, str]:
    variant = LOCALES[locale]
    greeting, default = GREETINGS[variant]
    return variant, greeting.format(name or default), BODIES[variant]


def _bodies(emulator: EmulatorClient) -> dict[str, dict[str, Any]]:
    received: list[Received] = emulator.received()
    assert all(r.violation is None for r in received), [r.violation for r in received][:3]
    return {r.token: r.body["message"] for r in received if r.accepted}


def test_each_device_gets_its_language_and_name_as_previewed_and_a_correction_re_renders(
        fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    devices, expected = _population()
    own, audience = fleet.import_own(api, devices)
    by_token = {device["token"]: expected[base["token"]] for device, base in zip(own, devices,
                                                                                    strict=True)}
    _estimated_with_the_cli(fleet, audience, by_token)
    emulator.configure(keep_bodies=True)
    campaign_id = api.create_campaign(**CONTENT, audience=audience)
    watched = own[0]["token"]  # es-MX, with a first name
    preview = api.http.post("/v1/campaigns/preview", json={
        "campaign_id": campaign_id, "token": watched}).json()
    campaign = api.wait_finished(campaign_id)
    assert campaign["counts"] | {"maybe_delivered": 0} == {
        "targeted": len(own), "sent": len(own), "failed": 0, "unsent": 0, "maybe_delivered": 0,
        "suppressed": 0}

    received = _bodies(emulator)
    assert set(received) == set(by_token)
    assert received[watched] | {"token": masked_token(watched)} == preview["message"], (
        "the preview is what the device received, its token masked")
    for token, (locale, name) in by_token.items():
        variant, title, body = _expected_words(locale, name)
        message = received[token]
        assert message["notification"] == {"title": title, "body": body}, (locale, name)
        landing = message["data"]["landingUrl"]
        assert landing == ("https://example.com/en" if variant == "en"
                           else f"https://example.com/live?u={_user_id(own, token)}")
    audit = {line["token"]: line["variant"] for line in api.audit(campaign_id, "sent")}
    assert audit == {token: LOCALES[locale] for token, (locale, _) in by_token.items()}

    _corrected(api, emulator, campaign_id, by_token, own)


def _estimated_with_the_cli(fleet: Fleet, audience: dict[str, Any],
                            by_token: dict[str, tuple[str, str | None]]) -> None:
    """``herald audiences estimate --language ...``: the audience split as the sender matches."""
    config = fleet.stack.config
    result = CliRunner().invoke(cli.app, [
        "audiences", "estimate", "--filter", json.dumps(audience), "--api", config.api_url,
        "--api-key", config.api_key, *(arg for tag in CONTENT["translations"]
                                       for arg in ("--language", tag))])
    assert result.exit_code == 0, result.output
    split = {words[0]: int(words[1]) for words in map(str.split, result.stdout.splitlines()[1:])}
    assert split == dict(Counter(LOCALES[locale] for locale, _ in by_token.values()))


def _user_id(own: list[dict[str, Any]], token: str) -> str:
    return next(str(device["user_id"]) for device in own if device["token"] == token)


def _corrected(api: Api, emulator: EmulatorClient, original_id: str,
               by_token: dict[str, tuple[str, str | None]], own: list[dict[str, Any]]) -> None:
    """A correction with new words re-renders for each device; one device whose name makes its
    message too big fails alone, with the reason in the audit."""
    big = next(token for token, (locale, name) in by_token.items() if locale == "fr" and name)
    api.import_devices([{**next(d for d in own if d["token"] == big),
                         "attributes": {"first_name": TOO_BIG}}])
    emulator.reset()
    emulator.configure(keep_bodies=True)
    corrected = api.http.post(f"/v1/campaigns/{original_id}/correct", json={
        "title": "Fixed for " + NAME % "you", "body": NAME % "you",
        "translations": {"es": {"title": "Corregido para " + NAME % "amigo", "body": "Ya"}}})
    assert corrected.status_code == 202, corrected.text
    amend = corrected.json()["amend"]
    assert corrected.json()["retarget"] is None
    assert amend["languages"] == dict(Counter(LOCALES[locale] for locale, _ in by_token.values()))
    finished = api.wait_finished(amend["id"])
    assert (finished["counts"]["sent"], finished["counts"]["failed"]) == (len(by_token) - 1, 1)
    received = _bodies(emulator)
    for token, (locale, name) in by_token.items():
        if token == big:
            continue
        if locale.startswith("es"):  # es-MX has no translation now: its es falls back to es
            title, body = f"Corregido para {name or 'amigo'}", "Ya"
        else:
            title, body = f"Fixed for {name or 'you'}", name or "you"
        assert received[token]["notification"] == {"title": title, "body": body}, (locale, name)
    failed = api.audit(amend["id"], "failed")
    assert [(line["token"], line["error"], line["variant"]) for line in failed] == [
        (big, "MESSAGE_TOO_BIG", "default")]
