"""Test sends: a campaign's exact message, sent to a few named devices before (or while) it
goes out to its audience.

The body is the senders' own (``sending.campaigns.message_of``: the same options, replacement
key and collapse key, each device's language and placeholders rendered from its registration,
byte for byte but for a TTL's APNs expiry, which each request counts from its own start),
sent through the same FCM client; a device whose message cannot be made (over 4 KB rendered, a
field that cannot be rendered) is answered with that reason and not sent. The outcome of each
device is answered and kept in ``test_sends``, never in the campaign's counts, chunks,
deliveries or audit, and no token is retired for what FCM answers here. Unknown devices refuse
the whole call (422, naming them), so a refused test send sends nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from herald.clock import utcnow
from herald.domain.access import Actor
from herald.domain.audience import Audience
from herald.domain.documents import Device, TestOutcome, TestSend, new_id
from herald.domain.fcm_errors import CONFIGURATION_ERRORS, FcmError, SendResult
from herald.domain.rendering import CompiledContent
from herald.domain.status import TESTABLE, Status
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import (
    CampaignLookup,
    DeviceRepository,
    Fcm,
    RateBucket,
    TestSendRepository,
)
from herald.service_layer.sending.campaigns import message_of

MAX_TEST_DEVICES = 100
"""What one call may name at most (the contract's bound; the policy's is lower)."""
TOKEN_SUFFIX_CHARS = 8
HOUR = timedelta(hours=1)
MISCONFIGURED = CONFIGURATION_ERRORS | {FcmError.UNAUTHENTICATED}
"""Answers that say Herald's FCM configuration (project, credentials, request) is wrong."""


class NotTestable(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(f"campaign is {status.value}: test sends are for campaigns not "
                         "finished or stopping")
        self.status = status


class UnknownDevices(ValueError):
    """Some named devices are not registered (or were retired): nothing was sent."""

    def __init__(self, kind: str, unknown: Sequence[str]) -> None:
        super().__init__(f"not registered (or retired): {len(unknown)} of the {kind} given; "
                         "nothing was sent")
        self.kind = kind
        self.unknown = list(unknown)


class TooManyDevices(ValueError):
    def __init__(self, count: int, most: int = MAX_TEST_DEVICES, earlier: int = 0) -> None:
        before = f" ({earlier} reached by its earlier test sends)" if earlier else ""
        super().__init__(f"a campaign's test sends reach at most {most} distinct devices in "
                         f"all; these would make {count}{before}")
        self.count = count


class PushDisabled(ValueError):
    """Some named devices turned push off: a test send is no way around that."""

    def __init__(self, device_ids: Sequence[str]) -> None:
        super().__init__(f"{len(device_ids)} of the devices named have push disabled; nothing "
                         "was sent")
        self.device_ids = list(device_ids)


class TestedTooOften(ValueError):
    """Some named devices had their handful of test sends this hour."""

    __test__ = False  # not a pytest test class

    def __init__(self, device_ids: Sequence[str], most: int) -> None:
        super().__init__(f"{len(device_ids)} of the devices named had {most} test sends in the "
                         "last hour already; nothing was sent")
        self.device_ids = list(device_ids)


@dataclass(frozen=True)
class TestSendPolicy:
    """How far test sends go (issue 31: they stay tests): ``max_devices`` distinct devices per
    campaign across all its test sends, and each device at most ``per_device_per_hour`` test
    sends an hour, whatever the campaign."""

    __test__ = False  # not a pytest test class

    max_devices: int = 25
    per_device_per_hour: int = 5


class FcmMisconfigured(Exception):
    """FCM refused the test send for a reason of configuration (project, credentials): the
    record is kept, and the caller is told what Google said."""

    def __init__(self, record: TestSend, error: str, message: str | None) -> None:
        super().__init__(f"FCM refused the test send: {error}"
                         + (f" ({message})" if message else "")
                         + "; check HERALD_FCM_PROJECT_ID and HERALD_FCM_CREDENTIALS")
        self.record = record


@dataclass(frozen=True)
class _Device:
    id: str
    fields: Device
    """As registered: the token, and the fields its language and placeholders are read from."""


class TestSender:
    """Sends a campaign's message to named devices (``POST /v1/campaigns/{id}/test``)."""

    __test__ = False  # not a pytest test class

    def __init__(self, campaigns: CampaignLookup, devices: DeviceRepository,
                 records: TestSendRepository, fcm: Fcm,
                 wall_clock: Callable[[], float] = time.time, *,
                 rate: RateBucket | None = None,
                 policy: TestSendPolicy = TestSendPolicy()) -> None:
        self._campaigns = campaigns
        self._rate = rate
        self._policy = policy
        self._wall_clock = wall_clock
        self._devices = devices
        self._records = records
        self._fcm = fcm

    async def send(self, campaign_id: str, tokens: Sequence[str] | None,
                   user_ids: Sequence[str] | None, by: Actor) -> TestSend:
        campaign = await self._campaigns.get(campaign_id)
        if campaign is None:
            raise CampaignNotFound(campaign_id)
        if campaign.status not in TESTABLE:
            raise NotTestable(campaign.status)
        devices = await (self._by_tokens(tokens) if tokens else self._by_users(user_ids or ()))
        if len(devices) > MAX_TEST_DEVICES:
            raise TooManyDevices(len(devices))
        await self._within_policy(campaign_id, devices)
        if self._rate is not None:  # like any send: the fleet's FCM rate
            await self._rate.take(len(devices))
        compiled = message_of(campaign)
        outcomes = await asyncio.gather(*(self._send_one(compiled, d) for d in devices))
        record = TestSend(id=new_id(), campaign_id=campaign.id, at=utcnow(), by=by,
                          status=campaign.status, outcomes=tuple(outcomes))
        await self._records.insert(record)
        refused = next((o for o in outcomes if o.error in MISCONFIGURED), None)
        if refused is not None and refused.error is not None:
            raise FcmMisconfigured(record, refused.error, refused.message)
        return record

    async def _within_policy(self, campaign_id: str, devices: Sequence[_Device]) -> None:
        """Refused (nothing sent) unless every device has push on, the campaign's test sends
        stay within their distinct devices, and no device had its handful this hour."""
        disabled = [d.id for d in devices if not d.fields.push_enabled]
        if disabled:
            raise PushDisabled(disabled)
        earlier = {o.device_id for r in await self._records.of_campaign(campaign_id, limit=0)
                   for o in r.outcomes}
        reached = earlier | {d.id for d in devices}
        if len(reached) > self._policy.max_devices:
            raise TooManyDevices(len(reached), self._policy.max_devices, len(earlier))
        counts = await self._records.per_device_since([d.id for d in devices], utcnow() - HOUR)
        often = [d.id for d in devices if counts.get(d.id, 0) >= self._policy.per_device_per_hour]
        if often:
            raise TestedTooOften(often, self._policy.per_device_per_hour)

    async def _by_tokens(self, tokens: Sequence[str]) -> list[_Device]:
        found = await asyncio.gather(*(self._devices.find_by_token(t) for t in tokens))
        unknown = [t for t, d in zip(tokens, found, strict=True) if d is None or d.invalid]
        if unknown:
            raise UnknownDevices("tokens", unknown)
        return [_Device(d.id, d) for d in found if d is not None]

    async def _by_users(self, user_ids: Sequence[str]) -> list[_Device]:
        audience = Audience(user_ids=list(user_ids), push_enabled=None)
        streamed = [recipient.token
                    async for _, recipient in self._devices.stream(audience, None, None)]
        if len(streamed) > MAX_TEST_DEVICES:  # before reading each device
            raise TooManyDevices(len(streamed))
        found = [d for d in await asyncio.gather(*(self._devices.find_by_token(t)
                                                   for t in streamed)) if d is not None]
        seen = {d.user_id for d in found}
        unknown = [u for u in user_ids if u not in seen]
        if unknown:
            raise UnknownDevices("user_ids", unknown)
        return [_Device(d.id, d) for d in found]

    async def _send_one(self, compiled: CompiledContent, device: _Device) -> TestOutcome:
        made = compiled.message_for(device.fields.token, device.fields)
        if made.body is None:
            return _device_outcome(device, made.code, made.failure)
        body = made.body  # each request dated as it starts, as a sender's window does
        result = await self._fcm.send(body.at(self._wall_clock()))
        if result.error is FcmError.UNAUTHENTICATED:  # a stale OAuth token: once more, anew
            self._fcm.rejected(result)
            result = await self._fcm.send(body.at(self._wall_clock()))
        return _outcome(device, result)


def _outcome(device: _Device, result: SendResult) -> TestOutcome:
    return _device_outcome(device, None if result.error is None else result.error.value,
                       result.message)


def _device_outcome(device: _Device, error: str | None, message: str | None) -> TestOutcome:
    """A device's outcome: ``error`` None is accepted by FCM."""
    token = device.fields.token
    return TestOutcome(device_id=device.id, token_suffix=token[-TOKEN_SUFFIX_CHARS:],
                       user_id=device.fields.user_id, error=error, message=message)
