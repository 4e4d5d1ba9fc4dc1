"""Test sends on the in-memory stores: the body is the senders' own for the device, only the
named devices get it, nothing of the campaign's own records changes, and the allowed statuses
are one set (``TESTABLE``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from herald.clock import utcnow
from herald.contracts.http import DeviceIn
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
    TestSender,
    UnknownDevices,
)
from tests.factories import actor, campaign
from tests.unit.fakes import FakeFcm, FakeFlags, fake_stores

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
