"""Issue 32, point 4, in the sender's window: no device gets two messages from Herald less than a
pace interval apart, whatever the deliveries (``domain/pace.py``); a target whose device must wait
waits aside, and the rest of its delivery and the other deliveries go on; a device FCM answered
"device message rate exceeded" is retried alone after ``Retry-After``, the project's rate spared.
The pace is the unit fake (``FakeDevicePace``: the domain's rule on the loop's clock); the Redis
script is ``tests/integration/test_device_pace.py``."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict

import pytest

from herald.domain.fcm_errors import FcmError, SendResult
from herald.domain.outcomes import Target
from herald.domain.pace import hold, interval_ms, reserve
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from tests.unit.fakes import FakeDevicePace, FakeFcm, UnlimitedBucket
from tests.unit.window_helpers import TEMPLATE, Records, always, targets

INTERVAL_S = 0.2


# --- the rule ---------------------------------------------------------------------------------------
def test_the_interval_is_a_minute_over_the_rate_and_zero_means_no_pace() -> None:
    assert interval_ms(120) == 500
    assert interval_ms(240) == 250
    assert interval_ms(0.5) == 120_000
    assert interval_ms(0) is None


def test_a_device_s_messages_start_at_least_one_interval_apart() -> None:
    first = reserve(0, now_ms=1_000, interval=500)
    assert first.now and first.next_ms == 1_500
    second = reserve(first.next_ms, now_ms=1_200, interval=500)
    assert not second.now and second.wait_ms == 300 and second.next_ms == 1_500  # not moved
    third = reserve(second.next_ms, now_ms=1_500, interval=500)
    assert third.now and third.next_ms == 2_000
    later = reserve(third.next_ms, now_ms=9_000, interval=500)  # no burst saved up meanwhile
    assert later.now and later.next_ms == 9_500


@pytest.mark.parametrize("rate_per_min", [240, 120, 7.5])
def test_no_minute_holds_more_than_the_rate(rate_per_min: float) -> None:
    """Messages asked for every 10 ms for 3 minutes, each sent when its device's pace says: no
    sliding minute holds more than the rate."""
    interval = interval_ms(rate_per_min)
    assert interval is not None
    next_ms, sent = 0, []
    for now in range(0, 180_000, 10):
        reserved = reserve(next_ms, now, interval)
        next_ms = reserved.next_ms
        if reserved.now:
            sent.append(now)
    assert max(sum(1 for t in sent if start <= t < start + 60_000)
               for start in sent) == math.ceil(rate_per_min)  # 7.5: one every 8 s


def test_a_hold_moves_the_device_s_moment_never_back() -> None:
    assert hold(0, now_ms=1_000, seconds=2) == 3_000
    assert hold(5_000, now_ms=1_000, seconds=2) == 5_000


# --- the window -------------------------------------------------------------------------------------
class Clocked:
    """FCM's answers by token, and the loop time of every request, by token."""

    def __init__(self, answers: dict[str, list[SendResult]] | None = None) -> None:
        self.answers = answers or {}
        self.at: dict[str, list[float]] = defaultdict(list)

    def __call__(self, token: str) -> SendResult:
        self.at[token].append(asyncio.get_running_loop().time())
        queued = self.answers.get(token)
        return queued.pop(0) if queued else SendResult(None)


def paced_window(fcm: FakeFcm, pace: FakeDevicePace, bucket: UnlimitedBucket | None = None,
                 max_retries: int = 0) -> SendWindow:
    return SendWindow(fcm, WindowPolicy(connections=8, unrecorded=50, max_retries=max_retries,
                                        group_wait_s=0.01),
                      bucket or UnlimitedBucket(), pace=pace)


async def send(window: SendWindow, todo: list[Target], records: Records,
               cancelled: asyncio.Event | None = None) -> None:
    await window.send(TEMPLATE, todo, may_start=always, cancelled=cancelled or asyncio.Event(),
                      record=records.write)


async def test_two_deliveries_to_the_same_devices_reach_each_one_interval_apart() -> None:
    clock, pace = Clocked(), FakeDevicePace(INTERVAL_S)
    window = paced_window(FakeFcm(clock), pace)
    first, second, other = Records(), Records(), Records()
    started = asyncio.get_running_loop().time()
    await asyncio.gather(send(window, targets("a", 20), first),
                         send(window, targets("a", 20), second),
                         send(window, targets("b", 20), other))
    assert sorted(first.written) == sorted(second.written) == sorted(f"a-{i}" for i in range(20))
    assert sorted(other.written) == sorted(f"b-{i}" for i in range(20))
    for token in first.written:
        one, two = clock.at[token]
        assert two - one >= INTERVAL_S  # the second waited for its device's pace
    # Devices nobody else sent to were not held back by the ones that waited.
    assert max(clock.at[f"b-{i}"][0] for i in range(20)) - started < INTERVAL_S
    assert len(pace.batches) <= 6  # a round trip per block of targets, not per message


async def test_a_target_waiting_for_its_device_holds_back_nothing_else_of_its_delivery() -> None:
    clock, pace = Clocked(), FakeDevicePace(INTERVAL_S)
    window = paced_window(FakeFcm(clock), pace)
    await send(window, [Target(0, "busy")], Records())  # the device had one just now
    records = Records()
    started = asyncio.get_running_loop().time()
    await send(window, [Target(0, "busy"), *targets("c", 10)[1:]], records)
    assert sorted(records.written) == sorted(["busy", *(f"c-{i}" for i in range(1, 10))])
    assert clock.at["busy"][1] - clock.at["busy"][0] >= INTERVAL_S
    assert max(clock.at[f"c-{i}"][0] for i in range(1, 10)) - started < INTERVAL_S / 2


async def test_a_cancel_while_targets_wait_for_their_devices_leaves_them_unsent() -> None:
    clock, pace = Clocked(), FakeDevicePace(30.0)
    window = paced_window(FakeFcm(clock), pace)
    await send(window, targets("d", 5), Records())
    records, cancelled = Records(), asyncio.Event()
    task = asyncio.create_task(send(window, targets("d", 5), records, cancelled))
    await asyncio.sleep(0.05)
    cancelled.set()
    await asyncio.wait_for(task, 1.0)  # not the 30 s of the pace
    assert records.written == []  # unsent: no outcome, never a failure
    assert all(len(at) == 1 for at in clock.at.values())


async def test_a_device_over_its_rate_at_fcm_is_retried_alone_and_the_project_is_not_slowed(
        ) -> None:
    """FCM answers one device "device message rate exceeded" (Retry-After 0.3 s): that device is
    held and retried after it; every other request goes on at once and the project's bucket is
    not penalized."""
    clock = Clocked({"e-0": [SendResult(FcmError.DEVICE_QUOTA_EXCEEDED, retry_after_s=0.3)]})
    pace, bucket = FakeDevicePace(INTERVAL_S), UnlimitedBucket()
    window = paced_window(FakeFcm(clock), pace, bucket, max_retries=2)
    records = Records()
    started = asyncio.get_running_loop().time()
    await send(window, targets("e", 30), records)
    assert sorted(records.written) == sorted(f"e-{i}" for i in range(30))
    assert records.errors["e-0"] is None  # sent at the retry
    refused, retried = clock.at["e-0"]
    assert retried - refused >= 0.3
    assert max(clock.at[f"e-{i}"][0] for i in range(1, 30)) - started < 0.3
    assert bucket.penalties_s == []
    assert [token for token, _ in pace.holds] == ["e-0"] and pace.holds[0][1] >= 0.3


async def test_the_project_s_quota_still_slows_everything() -> None:
    clock = Clocked({"f-0": [SendResult(FcmError.QUOTA_EXCEEDED, retry_after_s=0.3)]})
    pace, bucket = FakeDevicePace(INTERVAL_S), UnlimitedBucket()
    window = paced_window(FakeFcm(clock), pace, bucket, max_retries=2)
    await send(window, targets("f", 3), Records())
    assert bucket.penalties_s == [0.3] and pace.holds == []
