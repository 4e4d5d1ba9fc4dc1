"""Test sends on the in-memory stores: the body is the senders' own for the device, only the
named devices get it, nothing of the campaign's own records changes, and the allowed statuses
are one set (``TESTABLE``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from herald.clock import utcnow
from herald.contracts.http import DeviceIn, TestSendRequest
from herald.domain.documents import CampaignContent
from herald.domain.fcm_errors import FcmError, SendResult
from herald.domain.payload import ClickActions, SendOptions
from herald.domain.rendering import Translation
from herald.domain.status import TESTABLE, Status
from herald.service_layer.ports import Stores
from herald.service_layer.sending.campaigns import CampaignCache, CampaignInfo
from herald.service_layer.stopping import PodView
from herald.service_layer.test_sends import (
    FcmMisconfigured,
    NotTestable,
    PushDisabled,
    TestedTooOften,
    TestSender,
    TestSendPolicy,
    TooManyDevices,
    UnknownDevices,
)
from tests.factories import actor, campaign
from tests.unit.fakes import FakeFcm, FakeFlags, UnlimitedBucket, fake_stores

OPTIONS = SendOptions(ttl_s=30, priority="high", android_channel_id="news", sound="default",
                      badge=3, click=ClickActions(android="OPEN", ios="OPEN",
                                                  web="https://x.test/open"),
                      analytics_label="launch")
WHO = actor("marketing")
NOW_S = 1_795_500_000.0


async def _rig(answer: FcmError | None = None,
               now_s: float = NOW_S) -> tuple[Stores, TestSender, FakeFcm]:
    stores = fake_stores()
    await stores.devices.upsert([DeviceIn(token=f"tok-{i}", platform="android",
                                          user_id=f"u{i % 2}") for i in range(4)], utcnow())
    fcm = FakeFcm(lambda _token: SendResult(answer) if answer else SendResult())
    return stores, TestSender(stores.campaigns, stores.devices, stores.test_sends, fcm,
                              wall_clock=lambda: now_s), fcm


@pytest.mark.parametrize("sent_s", [NOW_S, NOW_S + 40])
async def test_the_body_is_the_one_the_senders_send_to_that_device(sent_s: float) -> None:
    """Byte for byte the request a sender makes for that device at the same moment; at
    another moment, the same bytes but for the APNs expiry (30 s after each one's own moment)."""
    stores, sender, fcm = await _rig(now_s=sent_s)
    await stores.devices.upsert([DeviceIn(token="tok-ana", platform="android", locale="es-MX",
                                          attributes={"first_name": "Ana"})], utcnow())
    hola = Translation(title='Hola {{ attributes.first_name | default("amigo") }}', body="B")
    sending = campaign(status=Status.IN_PROGRESS, replace_key="launch",
                       content=CampaignContent(title="T", body="B", data={"landingUrl": "x"},
                                               image_url="https://x.test/i.png",
                                               options=OPTIONS, translations={"es": hola}))
    await stores.campaigns.insert(sending)
    record = await sender.send(sending.id, ["tok-2", "tok-ana"], None, WHO)
    info = await CampaignCache(stores.campaigns, PodView(stores.campaigns, FakeFlags())).get(sending.id)
    assert isinstance(info, CampaignInfo)
    made = [info.content.message_for(token, device).body for token, device in [
        (t, await stores.devices.find_by_token(t)) for t in ("tok-2", "tok-ana")] if device]
    expected = [body.at(NOW_S) for body in made if body is not None]
    expiry = f'"apns-expiration":"{int(sent_s) + 30}"'.encode()
    assert sorted(fcm.bodies) == sorted(body.replace(f'"apns-expiration":"{int(NOW_S) + 30}"'
                                                     .encode(), expiry) for body in expected)
    assert all(body.count(expiry) == 1 for body in fcm.bodies)
    assert any(b'"title":"Hola Ana"' in body for body in fcm.bodies)
    assert sorted((o.token_suffix, o.accepted) for o in record.outcomes) == [
        ("tok-2", True), ("tok-ana", True)]
    assert await stores.campaigns.get(sending.id) == sending


async def test_user_ids_reach_every_device_of_those_users_and_nobody_else() -> None:
    stores, sender, fcm = await _rig()
    held = campaign(status=Status.AWAITING_APPROVAL)
    await stores.campaigns.insert(held)
    await sender.send(held.id, None, ["u1"], WHO)
    assert sorted(fcm.sent) == ["tok-1", "tok-3"]
    assert [r.by for r in stores.test_sends.records] == [WHO]


async def test_unknown_devices_send_nothing_and_record_nothing() -> None:
    stores, sender, fcm = await _rig()
    held = campaign(status=Status.SCHEDULED)
    await stores.campaigns.insert(held)
    with pytest.raises(UnknownDevices) as unknown:
        await sender.send(held.id, ["tok-1", "nope"], None, WHO)
    assert unknown.value.unknown == ["nope"]
    assert fcm.sent == [] and stores.test_sends.records == []


@pytest.mark.parametrize("status", list(Status))
async def test_test_sends_are_allowed_exactly_in_the_testable_statuses(status: Status) -> None:
    stores, sender, fcm = await _rig()
    held = campaign(status=status)
    await stores.campaigns.insert(held)
    if status in TESTABLE:
        await sender.send(held.id, ["tok-0"], None, WHO)
        assert fcm.sent == ["tok-0"]
    else:
        with pytest.raises(NotTestable):
            await sender.send(held.id, ["tok-0"], None, WHO)
        assert fcm.sent == []


async def test_a_configuration_error_is_raised_with_the_record_kept() -> None:
    stores, sender, _ = await _rig(FcmError.PERMISSION_DENIED)
    held = replace(campaign(), status=Status.PENDING)
    await stores.campaigns.insert(held)
    with pytest.raises(FcmMisconfigured):
        await sender.send(held.id, ["tok-0"], None, WHO)
    assert len(stores.test_sends.records) == 1


# --- they stay tests (issue 31 point 2) ------------------------------------------------------
async def _testable(stores: Stores) -> str:
    record = campaign(status=Status.AWAITING_APPROVAL)
    await stores.campaigns.insert(record)
    return record.id


async def _tested(stores: Stores, fcm: FakeFcm, **policy: int) -> TestSender:
    return TestSender(stores.campaigns, stores.devices, stores.test_sends, fcm,
                      policy=TestSendPolicy(**policy), rate=CountingRate())


class CountingRate(UnlimitedBucket):
    """The fleet's FCM rate as a test send takes from it."""


async def test_a_campaigns_test_sends_reach_a_few_distinct_devices_in_all() -> None:
    stores, _, fcm = await _rig()
    campaign_id = await _testable(stores)
    sender = await _tested(stores, fcm, max_devices=3)
    await sender.send(campaign_id, ["tok-0", "tok-1"], None, WHO)
    await sender.send(campaign_id, ["tok-1", "tok-2"], None, WHO)  # 3 distinct: allowed
    with pytest.raises(TooManyDevices, match="at most 3 distinct devices"):
        await sender.send(campaign_id, ["tok-3"], None, WHO)
    assert sorted(fcm.sent) == ["tok-0", "tok-1", "tok-1", "tok-2"]
    assert len(await stores.test_sends.of_campaign(campaign_id)) == 2


async def test_a_device_gets_a_handful_of_test_sends_an_hour_whatever_the_campaign() -> None:
    stores, _, fcm = await _rig()
    sender = await _tested(stores, fcm, per_device_per_hour=2)
    for _ in range(2):
        await sender.send(await _testable(stores), ["tok-0"], None, WHO)
    with pytest.raises(TestedTooOften):
        await sender.send(await _testable(stores), ["tok-0", "tok-1"], None, WHO)
    assert fcm.sent == ["tok-0", "tok-0"], "a refused call sends nothing"


async def test_a_device_with_push_disabled_is_refused_and_nothing_is_sent() -> None:
    stores, _, fcm = await _rig()
    await stores.devices.upsert([DeviceIn(token="tok-off", platform="ios", push_enabled=False)],
                                utcnow())
    sender = await _tested(stores, fcm)
    with pytest.raises(PushDisabled):
        await sender.send(await _testable(stores), ["tok-0", "tok-off"], None, WHO)
    assert fcm.sent == []


async def test_a_test_send_takes_its_tokens_from_the_fleets_rate() -> None:
    stores, _, fcm = await _rig()
    rate = CountingRate()
    sender = TestSender(stores.campaigns, stores.devices, stores.test_sends, fcm, rate=rate)
    await sender.send(await _testable(stores), ["tok-0", "tok-1", "tok-2"], None, WHO)
    assert rate.taken == 3


def test_a_device_named_twice_in_one_call_is_refused() -> None:
    with pytest.raises(ValidationError, match="at most once"):
        TestSendRequest(tokens=["tok-0"] * 100)
