"""The sender's sliding window: requests keep flowing across chunk boundaries, no more than
``connections`` on the wire, no more than ``unrecorded`` started and not yet written, outcomes
written in groups, a cancel stops new requests at once, and a failed write stops the delivery."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from herald.adapters.fcm import SENT, SendResult
from herald.domain.fcm_errors import FcmError
from herald.domain.outcomes import Target
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from tests.unit.fakes import HeldFcm, UnlimitedBucket
from tests.unit.window_helpers import TEMPLATE, Records, always, targets, until


def window(fcm: HeldFcm, *, connections: int, unrecorded: int, group_wait_s: float = 0.01,
           max_retries: int = 0) -> SendWindow:
    policy = WindowPolicy(connections=connections, unrecorded=unrecorded, max_retries=max_retries,
                          group_wait_s=group_wait_s)
    return SendWindow(fcm, policy, UnlimitedBucket())


def start(sender: SendWindow, todo: list[Target], records: Records,
          cancelled: asyncio.Event | None = None,
          may_start: Callable[[], Awaitable[bool]] = always,
          stops: list[SendResult] | None = None) -> asyncio.Task[None]:
    return asyncio.create_task(sender.send(
        TEMPLATE, todo, may_start=may_start, cancelled=cancelled or asyncio.Event(),
        record=records.write,
        stop=(stops.append if stops is not None else lambda _result: None)))


async def answer_all(fcm: HeldFcm, task: asyncio.Task[None]) -> None:
    """Answer requests as they arrive until the delivery is done."""
    while not task.done():
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0)
    await task


async def test_every_target_is_sent_once_and_written_in_groups_of_a_quarter_of_the_bound() -> None:
    fcm, records = HeldFcm(), Records()
    sender = window(fcm, connections=4, unrecorded=8, group_wait_s=60)
    await answer_all(fcm, start(sender, targets("a", 20), records))
    assert sorted(fcm.sent) == sorted(t.token for t in targets("a", 20))
    assert sorted(records.written) == sorted(fcm.sent)
    assert all(len(group) <= 2 for group in records.groups)  # 8 // 4
    assert fcm.most_on_wire == 4


async def test_a_partial_group_is_written_after_the_group_wait() -> None:
    fcm, records = HeldFcm(), Records()
    sender = window(fcm, connections=4, unrecorded=40, group_wait_s=0.02)
    task = start(sender, targets("a", 3), records)
    await until(lambda: len(fcm.on_wire) == 3)
    fcm.release(3)
    await until(lambda: len(records.written) == 3)
    assert records.groups == [["a-0", "a-1", "a-2"]]  # one write, though the group holds 10
    await task


async def test_the_window_slides_past_a_slow_request_and_across_chunks() -> None:
    """One request of chunk a hangs; the others of a, then those of b, keep flowing through the
    other connections: nothing waits for the slowest of a batch."""
    fcm, records_a, records_b = HeldFcm(), Records(), Records()
    sender = window(fcm, connections=2, unrecorded=50)
    first = start(sender, targets("a", 5), records_a)
    second = start(sender, targets("b", 5), records_b)
    await until(lambda: len(fcm.on_wire) == 2)
    slow = fcm.on_wire.pop(0)  # a-0 stays on the wire
    for _ in range(9):  # a-1..a-4, then b-0..b-4, one connection between them
        await until(lambda: len(fcm.on_wire) == 1)
        fcm.release(1)
    await second
    assert sorted(records_b.written) == [f"b-{i}" for i in range(5)]
    assert not first.done() and "a-0" not in records_a.written
    slow.set_result(None)
    await first
    assert sorted(records_a.written) == [f"a-{i}" for i in range(5)]


async def test_no_more_than_the_bound_are_started_and_unrecorded_across_deliveries() -> None:
    """Writes are held: the window stops admitting once ``unrecorded`` requests are answered
    but unwritten, whatever the number of connections or deliveries."""
    fcm, records_a, records_b = HeldFcm(), Records(), Records()
    records_a.gate.clear()
    records_b.gate.clear()
    sender = window(fcm, connections=16, unrecorded=6)
    tasks = [start(sender, targets("a", 10), records_a), start(sender, targets("b", 10), records_b)]
    for _ in range(4):
        fcm.release(len(fcm.on_wire))
        await asyncio.sleep(0.01)
    assert len(fcm.sent) == 6 and fcm.most_on_wire == 6
    records_a.gate.set()
    records_b.gate.set()
    for task in tasks:
        await answer_all(fcm, task)
    assert sorted(records_a.written + records_b.written) == sorted(fcm.sent)
    assert len(fcm.sent) == 20


async def test_a_cancel_stops_every_request_that_has_not_started() -> None:
    fcm, records = HeldFcm(), Records()
    cancelled = asyncio.Event()
    sender = window(fcm, connections=3, unrecorded=10)
    task = start(sender, targets("a", 10), records, cancelled)
    await until(lambda: len(fcm.on_wire) == 3)
    cancelled.set()
    fcm.release(3)
    await task
    assert fcm.sent == ["a-0", "a-1", "a-2"]
    assert sorted(records.written) == fcm.sent  # those on the wire are answered and recorded


async def test_a_refused_start_admits_nothing_more() -> None:
    fcm, records = HeldFcm(), Records()
    allowed = 4

    async def four_only() -> bool:
        nonlocal allowed
        allowed -= 1
        return allowed >= 0

    sender = window(fcm, connections=8, unrecorded=10)
    await answer_all(fcm, start(sender, targets("a", 10), records, may_start=four_only))
    assert sorted(records.written) == ["a-0", "a-1", "a-2", "a-3"]


async def test_a_failed_write_stops_the_delivery_and_frees_the_window() -> None:
    fcm, records = HeldFcm(), Records()
    records.fail = True
    sender = window(fcm, connections=2, unrecorded=4)
    task = start(sender, targets("a", 50), records)
    with pytest.raises(ConnectionError):
        await answer_all(fcm, task)
    assert len(fcm.sent) < 50
    healthy = Records()
    await answer_all(fcm, start(sender, targets("b", 6), healthy))  # every permit came back
    assert len(healthy.written) == 6


async def test_push_back_is_retried_and_the_last_answer_recorded() -> None:
    answers = {"a-0": [SendResult(FcmError.UNAVAILABLE, retry_after_s=None)]}

    def answer(token: str) -> SendResult:
        queued = answers.get(token)
        return queued.pop(0) if queued else SendResult(None)

    fcm, records = HeldFcm(answer), Records()
    sender = window(fcm, connections=2, unrecorded=4, max_retries=2)
    await answer_all(fcm, start(sender, targets("a", 2), records))
    assert sorted(fcm.sent) == ["a-0", "a-0", "a-1"]
    assert sorted(records.written) == ["a-0", "a-1"]


async def test_a_cancel_during_a_retrys_back_off_leaves_the_target_unsent_and_frees_its_permit(
        ) -> None:
    answers = {"a-0": [SendResult(FcmError.UNAVAILABLE, retry_after_s=30.0)]}

    def answer(token: str) -> SendResult:
        queued = answers.get(token)
        return queued.pop(0) if queued else SendResult(None)

    fcm, records = HeldFcm(answer), Records()
    cancelled = asyncio.Event()
    sender = window(fcm, connections=2, unrecorded=2, max_retries=3)
    task = start(sender, targets("a", 2), records, cancelled)
    await until(lambda: len(fcm.on_wire) == 2)
    fcm.release(2)  # a-0 is pushed back for 30 s, a-1 is sent
    await until(lambda: records.written == ["a-1"])
    cancelled.set()
    await asyncio.wait_for(task, 1.0)  # the back-off is cut short
    assert fcm.sent == ["a-0", "a-1"] and records.written == ["a-1"]
    healthy = Records()
    healthy.gate.clear()
    second = start(sender, targets("b", 4), healthy)
    await until(lambda: len(fcm.on_wire) == 2, timeout_s=1.0)  # both permits came back
    healthy.gate.set()
    await answer_all(fcm, second)
    assert sorted(healthy.written) == ["b-0", "b-1", "b-2", "b-3"]


# --- answers that are not a recipient's outcome -----------------------------------------------------
def scripted(answers: dict[str, list[SendResult]]) -> Callable[[str], SendResult]:
    """FCM answering each token's requests in turn from ``answers``, then accepting them."""
    def answer(token: str) -> SendResult:
        queued = answers.get(token)
        return queued.pop(0) if queued else SENT
    return answer


async def test_a_configuration_error_stops_the_campaign_after_the_requests_on_the_wire() -> None:
    refused = SendResult(FcmError.PERMISSION_DENIED, message="Permission denied")
    fcm, records, stops = HeldFcm(lambda _token: refused), Records(), []
    cancelled = asyncio.Event()
    sender = window(fcm, connections=4, unrecorded=100)
    task = start(sender, targets("a", 50), records, cancelled, stops=stops)
    await until(lambda: len(fcm.on_wire) == 4)
    fcm.release(1)
    await until(lambda: cancelled.is_set())
    fcm.release(3)
    await task
    assert len(fcm.sent) == 4  # nothing started after the first refusal
    assert set(records.errors.values()) == {FcmError.PERMISSION_DENIED}
    assert sorted(records.errors) == sorted(fcm.sent)
    assert stops and all(stop.error is FcmError.PERMISSION_DENIED for stop in stops)


async def test_a_401_gets_a_new_token_and_the_request_is_sent_again_once() -> None:
    unauthenticated = SendResult(FcmError.UNAUTHENTICATED, credential="Bearer old")
    fcm, records, stops = HeldFcm(scripted({"a-0": [unauthenticated]})), Records(), []
    sender = window(fcm, connections=2, unrecorded=4, max_retries=0)
    await answer_all(fcm, start(sender, targets("a", 2), records, stops=stops))
    assert sorted(fcm.sent) == ["a-0", "a-0", "a-1"]
    assert fcm.rejections == ["Bearer old"]
    assert records.errors == {"a-0": None, "a-1": None}
    assert stops == []


async def test_a_401_that_survives_a_new_token_stops_the_campaign() -> None:
    unauthenticated = SendResult(FcmError.UNAUTHENTICATED, credential="Bearer any")
    fcm, records, stops = HeldFcm(lambda _token: unauthenticated), Records(), []
    sender = window(fcm, connections=1, unrecorded=4)
    await answer_all(fcm, start(sender, targets("a", 10), records, stops=stops))
    assert fcm.sent == ["a-0", "a-0"]
    assert records.errors == {"a-0": FcmError.UNAUTHENTICATED}
    assert [stop.error for stop in stops] == [FcmError.UNAUTHENTICATED]


async def test_a_timeout_is_recorded_as_such_and_never_sent_again() -> None:
    fcm, records = HeldFcm(scripted({"a-0": [SendResult(FcmError.TIMEOUT)]})), Records()
    sender = window(fcm, connections=2, unrecorded=4, max_retries=3)
    await answer_all(fcm, start(sender, targets("a", 2), records))
    assert sorted(fcm.sent) == ["a-0", "a-1"]
    assert records.errors == {"a-0": FcmError.TIMEOUT, "a-1": None}


async def test_without_an_access_token_nothing_is_recorded_and_the_campaign_stops() -> None:
    no_token = SendResult(FcmError.OAUTH_REFUSED, message="invalid_grant", attempted=False)
    fcm, records, stops = HeldFcm(lambda _token: no_token), Records(), []
    sender = window(fcm, connections=2, unrecorded=2)
    await answer_all(fcm, start(sender, targets("a", 10), records, stops=stops))
    assert records.written == []  # the recipients stay unsent
    assert stops and stops[0].error is FcmError.OAUTH_REFUSED
    again = start(sender, targets("b", 2), Records())
    await until(lambda: len(fcm.on_wire) == 2, timeout_s=1.0)  # both permits came back
    await answer_all(fcm, again)


async def test_a_token_endpoint_that_never_answers_is_retried_then_stops_the_campaign() -> None:
    no_answer = SendResult(FcmError.CONNECTION_ERROR, message="timed out", attempted=False)
    fcm, records, stops = HeldFcm(lambda _token: no_answer), Records(), []
    sender = window(fcm, connections=1, unrecorded=2, max_retries=1)
    await answer_all(fcm, start(sender, targets("a", 5), records, stops=stops))
    assert len(fcm.sent) == 3 and set(fcm.sent) == {"a-0", "a-1"}  # the second retry found the
    # campaign stopped by the first
    assert records.written == []
    assert [stop.error for stop in stops] == [FcmError.OAUTH_REFUSED]
