"""Issue 30, point 5: every time-relative field of a message is computed for the request being
sent. A TTL's APNs expiry (``apns-expiration``, an absolute epoch second) counts from the moment
each request starts, on the shared path (``MessageTemplate.body_for``) and the per-device path
(a ``WireBody`` rendered when its chunk is taken up, dated by the window), with a fake clock; at
one moment the bytes are exactly those the message would have had if encoded whole then."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.domain.fcm_errors import FcmError, SendResult
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.payload import (
    MessageTemplate,
    SendOptions,
    WireBody,
    build_payload,
    expires_after_s,
)
from herald.domain.rendering import Translation, compile_content
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from tests.unit.fakes import FakeFcm, UnlimitedBucket

KEY = "herald-6b0137d0eaff6ead39685496"
TTL = SendOptions(ttl_s=30, priority="high")
T0 = 1_795_500_000.0
PERSONAL_TITLE = 'Hi {{ attributes.first_name | default("there") }}'


class Device:
    platform = "ios"
    user_id = "u1"
    locale = None
    timezone = None
    attributes: dict[str, Any] = {"first_name": "Ana"}


def whole(title: str, data: dict[str, str], options: SendOptions | None, token: str,
          now_s: float) -> bytes:
    """The message encoded whole at ``now_s``: what a body made ahead must equal at that moment."""
    return MessageTemplate(build_payload(title, "b", data, replace_key=KEY, options=options,
                                         now_s=now_s)).body_for(token)


def expiry(body: bytes) -> str:
    return str(orjson.loads(body)["message"]["apns"]["headers"]["apns-expiration"])


class Clock:
    """A wall clock a test moves."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


# --- the message ------------------------------------------------------------------------------------
def test_the_shared_message_dates_each_request_from_its_own_moment() -> None:
    template = MessageTemplate(build_payload("T", "b", {"k": "v"}, replace_key=KEY, options=TTL),
                               expires_after_s(TTL))
    for now_s in (T0, T0 + 40, T0 + 86_400.9):
        assert template.body_for("tok", now_s) == whole("T", {"k": "v"}, TTL, "tok", now_s)
        assert expiry(template.body_for("tok", now_s)) == str(int(now_s) + 30)


def test_a_rendered_message_made_ahead_is_dated_when_it_is_sent() -> None:
    content = compile_content(PERSONAL_TITLE, "b", {"k": "v"}, {}, options=TTL, replace_key=KEY)
    made = content.message_for("tok", Device())
    assert made.body is not None
    for now_s in (T0, T0 + 40):
        assert made.body.at(now_s) == whole("Hi Ana", {"k": "v"}, TTL, "tok", now_s)


def test_a_translated_message_without_placeholders_is_dated_when_it_is_sent() -> None:
    content = compile_content("T", "b", {}, {"es": Translation(title="Hola", body="b")},
                              options=TTL, replace_key=KEY)
    made = content.message_for("tok", Device())
    assert made.body is not None and content.per_device
    assert made.body.at(T0 + 40) == whole("T", {}, TTL, "tok", T0 + 40)


@pytest.mark.parametrize("options", [None, SendOptions(ttl_s=0), SendOptions(priority="normal")])
def test_a_message_without_a_ttl_or_with_ttl_0_has_nothing_to_date(
        options: SendOptions | None) -> None:
    """``ttl_s`` 0 is the constant expiry "0" (now or never); none: no expiry at all."""
    assert expires_after_s(options) is None
    content = compile_content(PERSONAL_TITLE, "b", {}, {}, options=options, replace_key=KEY)
    made = content.message_for("tok", Device())
    assert made.body is not None and made.body.expires_after_s is None
    assert made.body.at(T0) == made.body.at(T0 + 40) == whole("Hi Ana", {}, options, "tok", T0)
    template = MessageTemplate(build_payload("T", "b", {}, replace_key=KEY, options=options))
    assert template.body_for("tok") == template.body_for("tok", T0 + 40)


def test_a_message_that_expires_is_never_made_without_its_moment() -> None:
    template = MessageTemplate(build_payload("T", "b", {}, replace_key=KEY, options=TTL), 30)
    with pytest.raises(ValueError, match="now_s"):
        template.body_for("tok")


@given(title=st.text(min_size=1, max_size=40), value=st.text(max_size=40),
       now_s=st.floats(min_value=0, max_value=4_000_000_000))
def test_no_text_of_the_campaigns_can_take_the_expirys_place(title: str, value: str,
                                                             now_s: float) -> None:
    """The expiry is found by its JSON key; a title or a data value that spells that key (or
    looks like an expiry) is escaped in JSON and never mistaken for it."""
    def plain(text: str) -> str:  # no template syntax; a template sends breaks as \n
        return text.replace("{", "(").replace("\r", " ")
    tricky = {"k": plain(value) + '"apns-expiration":"1"', "k2": '","apns-expiration":"'}
    title = plain(title) + '"apns-expiration":"'
    template = MessageTemplate(build_payload(title, "b", tricky, replace_key=KEY, options=TTL), 30)
    content = compile_content(title + " {{ platform }}", "b", tricky, {}, options=TTL,
                              replace_key=KEY)
    made = content.message_for("tok", Device())
    assert made.body is not None
    assert template.body_for("tok", now_s) == whole(title, tricky, TTL, "tok", now_s)
    assert made.body.at(now_s) == whole(title + " ios", tricky, TTL, "tok", now_s)


# --- the window dates each request as it starts ---------------------------------------------------
def _window(fcm: FakeFcm, clock: Clock, max_retries: int = 0) -> SendWindow:
    return SendWindow(fcm, WindowPolicy(connections=1, unrecorded=8, max_retries=max_retries,
                                        group_wait_s=0.001), UnlimitedBucket(), wall_clock=clock)


async def _send(window: SendWindow, template: MessageTemplate | None,
                todo: list[Target]) -> list[RecipientOutcome]:
    written: list[RecipientOutcome] = []

    async def record(outcomes: list[RecipientOutcome]) -> None:
        written.extend(outcomes)

    await window.send(template, todo, may_start=_always, cancelled=asyncio.Event(),
                      record=record)
    return written


async def _always() -> bool:
    return True


async def test_the_window_dates_each_shared_request_when_it_starts() -> None:
    """The campaign was compiled at T0, paused 40 s, resumed: each request counts from its own
    start, the clock moving a second between requests."""
    clock = Clock(T0 + 40)
    template = MessageTemplate(build_payload("T", "b", {}, replace_key=KEY, options=TTL), 30)

    def answer(_token: str) -> SendResult:
        clock.now_s += 1
        return SendResult(None)

    fcm = FakeFcm(answer)
    await _send(_window(fcm, clock), template, [Target(i, f"t-{i}") for i in range(3)])
    assert [expiry(body) for body in fcm.bodies] == [str(int(T0) + 70 + i) for i in range(3)]


async def test_a_rendered_body_made_before_a_pause_is_dated_when_it_is_sent() -> None:
    content = compile_content(PERSONAL_TITLE, "b", {}, {}, options=TTL, replace_key=KEY)
    made = content.message_for("t-0", Device())  # rendered at T0, when its chunk was taken up
    assert isinstance(made.body, WireBody)
    fcm = FakeFcm(lambda _token: SendResult(None))
    await _send(_window(fcm, Clock(T0 + 40)), None, [Target(0, "t-0", made.body)])
    assert fcm.bodies == [whole("Hi Ana", {}, TTL, "t-0", T0 + 40)]


async def test_a_retried_request_is_dated_again() -> None:
    clock = Clock(T0)
    answers = [SendResult(FcmError.UNAVAILABLE, retry_after_s=None), SendResult(None)]

    def answer(_token: str) -> SendResult:
        clock.now_s += 5
        return answers.pop(0)

    template = MessageTemplate(build_payload("T", "b", {}, replace_key=KEY, options=TTL), 30)
    fcm = FakeFcm(answer)
    written = await _send(_window(fcm, clock, max_retries=1), template, [Target(0, "t-0")])
    assert [o.error for o in written] == [None]
    assert [expiry(body) for body in fcm.bodies] == [str(int(T0) + 30), str(int(T0) + 35)]
