"""The sender's window onto FCM: requests from every chunk in hand share one sliding window.

Lock-step batches (send 500, wait for the slowest, record, send the next 500) leave the
connections idle at every batch boundary. Here a new request starts as soon as a connection is
free, whichever chunk it belongs to, and outcomes are written as they arrive, in groups (one
bulk write per ``group_size`` outcomes or per ``group_wait_s``, whichever comes first).

Two bounds hold at every moment, for the whole pod:
- at most ``connections`` requests are on the wire (``HERALD_SENDER_CONCURRENCY``);
- at most ``unrecorded`` requests are *started and not yet recorded* (``HERALD_SENDER_BATCH_SIZE``):
  a request takes a permit before it starts and gives it back only once its outcome is written to
  MongoDB (or it ended without one: cancelled before it started). A request on the wire, one
  answered and waiting for its group, and one whose group is being written all hold a permit.
  Those are exactly the recipients a ``kill -9`` can leave sent but unrecorded, so the next
  delivery of their chunks sends at most one batch twice, across all the chunks this pod held.
With 256 connections and batches of 500, 256 requests can be on the wire while up to 244
answered ones wait for (or are in) their write: the write of one group overlaps the sending of
the next, and the connections stay busy as long as a group's write is quicker than a round trip.

Cancel: a request checks its campaign's cancel event (set by the broadcast) right before it
starts, after it got its connection; the chunk's own check (``may_start``: the Redis flag, the
channel, the budget) runs before each request is admitted to the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from herald.adapters.fcm import FcmClient, SendResult
from herald.adapters.rate_limit import TokenBucket
from herald.domain.payload import MessageTemplate
from herald.observability import FCM_REQUEST_SECONDS, FCM_RETRIES
from services.sender.delivery import Outcome, Target, backoff_s

TOKEN_BLOCK = 64
"""Rate-limit tokens taken from Redis at once: one round trip per 64 requests, not per request."""
RECORD_GROUP_WAIT_S = 0.05
"""Longest an answered request waits for its group to be written."""

RecordGroup = Callable[[list[Outcome]], Awaitable[None]]
MayStart = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class WindowPolicy:
    connections: int
    unrecorded: int
    max_retries: int
    group_wait_s: float = RECORD_GROUP_WAIT_S

    @property
    def group_size(self) -> int:
        """Outcomes per write: a quarter of the unrecorded bound, so that three groups can be
        on the wire or in writing while one fills."""
        return max(1, self.unrecorded // 4)


class OutcomeGroups:
    """One chunk delivery's answered requests, written in groups, one write at a time.

    Each outcome holds a permit of the window until its group is written (or failed to be).
    """

    def __init__(self, record: RecordGroup, permits: asyncio.Semaphore, size: int,
                 wait_s: float) -> None:
        self._record = record
        self._permits = permits
        self._size = size
        self._wait_s = wait_s
        self._pending: list[Outcome] = []
        self._timer: asyncio.TimerHandle | None = None
        self._writes: list[asyncio.Task[None]] = []
        self._writing = asyncio.Lock()
        self.failure: BaseException | None = None

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        if len(self._pending) >= self._size:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._wait_s, self.flush)

    def flush(self) -> None:
        """Start writing what is pending."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            outcomes, self._pending = self._pending, []
            self._writes.append(asyncio.create_task(self._write(outcomes)))

    async def drain(self) -> None:
        """Write the rest and wait for every write; raise the first write's failure."""
        self.flush()
        await asyncio.gather(*self._writes, return_exceptions=True)
        self._writes.clear()
        if self.failure is not None:
            raise self.failure

    async def _write(self, outcomes: list[Outcome]) -> None:
        try:
            async with self._writing:
                if self.failure is None:
                    await self._record(outcomes)
        except Exception as exc:  # the chunk is handed back; its unrecorded part is resent
            self.failure = self.failure or exc
        finally:
            for _ in outcomes:
                self._permits.release()


@dataclass
class _Delivery:
    """What one chunk delivery sends through the window."""

    template: MessageTemplate
    cancelled: asyncio.Event
    campaign_bucket: TokenBucket | None
    groups: OutcomeGroups
    tokens: int = 0
    failure: BaseException | None = None


class SendWindow:
    """The pod's requests to FCM: a sliding window shared by every chunk being sent."""

    def __init__(self, fcm: FcmClient, policy: WindowPolicy, project_bucket: TokenBucket) -> None:
        self._fcm = fcm
        self._policy = policy
        self._slots = asyncio.Semaphore(policy.connections)
        self._unrecorded = asyncio.Semaphore(policy.unrecorded)
        self._project_bucket = project_bucket

    async def send(self, template: MessageTemplate, targets: Iterable[Target], *,
                   may_start: MayStart, cancelled: asyncio.Event,
                   campaign_bucket: TokenBucket | None, record: RecordGroup) -> None:
        """Send to ``targets`` while ``may_start()`` allows, recording outcomes in groups.

        Returns once every request started here is answered and its outcome written; a target
        without an outcome (not admitted, or cancelled before it started) stays unsent.
        Raises the first failure to record (nothing more is started after it).
        """
        groups = OutcomeGroups(record, self._unrecorded, self._policy.group_size,
                               self._policy.group_wait_s)
        delivery = _Delivery(template, cancelled, campaign_bucket, groups)
        requests: set[asyncio.Task[None]] = set()
        try:
            await self._admit(delivery, targets, may_start, requests)
        finally:
            await asyncio.gather(*requests, return_exceptions=True)
            await groups.drain()
        if delivery.failure is not None:
            raise delivery.failure

    async def _admit(self, delivery: _Delivery, targets: Iterable[Target], may_start: MayStart,
                     requests: set[asyncio.Task[None]]) -> None:
        for target in targets:
            await self._unrecorded.acquire()
            if not await self._may_continue(delivery, may_start):
                self._unrecorded.release()
                return
            task = asyncio.create_task(self._request(delivery, target))
            requests.add(task)
            task.add_done_callback(requests.discard)

    async def _may_continue(self, delivery: _Delivery, may_start: MayStart) -> bool:
        if delivery.failure or delivery.groups.failure or delivery.cancelled.is_set():
            return False
        if not await may_start():
            return False
        if delivery.tokens == 0:
            delivery.tokens = await self._take_tokens(TOKEN_BLOCK, delivery)
            if delivery.tokens == 0:  # cancelled while waiting for the rate limit
                return False
        delivery.tokens -= 1
        return True

    async def _take_tokens(self, count: int, delivery: _Delivery) -> int:
        if delivery.campaign_bucket is not None:
            count = await delivery.campaign_bucket.take(count, delivery.cancelled)
        return await self._project_bucket.take(count, delivery.cancelled) if count else 0

    async def _request(self, delivery: _Delivery, target: Target) -> None:
        """One recipient: send, retry on push-back, hand the outcome to its group."""
        recorded = False
        try:
            outcome = await self._attempts(delivery, target)
            if outcome is not None:
                delivery.groups.add(outcome)  # the group releases the permit once written
                recorded = True
        except Exception as exc:
            delivery.failure = delivery.failure or exc
        finally:
            if not recorded:
                self._unrecorded.release()

    async def _attempts(self, delivery: _Delivery, target: Target) -> Outcome | None:
        body = delivery.template.body_for(target.token)
        max_retries = self._policy.max_retries
        for attempt in range(max_retries + 1):
            result = await self._send_once(body, delivery.cancelled)
            if result is None:
                return None  # cancelled before the request started: unsent
            if not result.retryable or attempt == max_retries:
                return Outcome(target, result.error)
            FCM_RETRIES.labels(result.error).inc()
            await self._back_off(attempt, result, delivery)
        return None  # unreachable: the last attempt returns

    async def _send_once(self, body: bytes, cancelled: asyncio.Event) -> SendResult | None:
        async with self._slots:
            if cancelled.is_set():
                return None
            started = time.perf_counter()
            result = await self._fcm.send(body)
            FCM_REQUEST_SECONDS.observe(time.perf_counter() - started)
            return result

    async def _back_off(self, attempt: int, result: SendResult, delivery: _Delivery) -> None:
        """Wait before retrying (a cancel cuts it short), then take a token for the retry."""
        if result.retry_after_s:
            await self._project_bucket.penalize(result.retry_after_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(delivery.cancelled.wait(),
                                   backoff_s(attempt, result.retry_after_s))
        if not delivery.cancelled.is_set():
            await self._take_tokens(1, delivery)


def outcomes_by_position(outcomes: Sequence[Outcome]) -> list[tuple[int, str | None]]:
    """``(position, error)`` of each outcome, as the chunk's records keep them."""
    return [(o.target.position, o.error.value if o.error else None) for o in outcomes]
