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
  answered and waiting for its group, one whose group is being written and one pushed back by
  FCM and waiting for its retry all hold a permit.
  Those are exactly the recipients a ``kill -9`` can leave sent but unrecorded, so the next
  delivery of their chunks sends at most one batch twice, across all the chunks this pod held.
With 256 connections and batches of 500, 256 requests can be on the wire while up to 244
answered ones wait for (or are in) their write: the write of one group overlaps the sending of
the next, and the connections stay busy as long as a group's write is quicker than a round trip.

The device pace (``HERALD_DEVICE_RATE_PER_MIN``, ``domain/pace.py``): a delivery asks the pace for
a block of its targets at once, after their rate tokens and before their permits (one round trip
per block, as for the tokens). A target whose device had a message from Herald less than an
interval ago (from any campaign, any sender) waits aside until its device's moment, without a
token or a permit, while the rest of the delivery goes on; it is then asked for again like any
other. A device FCM answered "device message rate exceeded" is retried alone, after FCM's
``Retry-After`` (or the back-off), and held in the pace meanwhile; the project's rate is not
slowed for it (any other push-back's ``Retry-After`` holds the whole fleet's bucket).

Cancel: a request checks its campaign's cancel event (set by the broadcast) right before it
starts, after it got its connection; the chunk's own check (``may_start``: the Redis flag, the
channel, the budget) runs before each request is admitted to the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from herald.domain.fcm_errors import ONE_DEVICE, Consequence, FcmError, SendResult
from herald.domain.lanes import LANES_FIRST_TO_LAST, Lane
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.payload import MessageTemplate
from herald.observability import (
    DEVICE_PACE_DEFERRED,
    FCM_ERRORS,
    FCM_REQUEST_SECONDS,
    FCM_RETRIES,
)
from herald.service_layer.ports import DevicePace, Fcm, RateBucket
from herald.service_layer.sending.permits import LanePermits

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0

TOKEN_BLOCK = 64
"""Rate-limit tokens taken from Redis at once: one round trip per 64 requests, not per request.
A delivery never takes more than it still has to send (a rollout's wave of 5 recipients in a
chunk takes 5)."""
PACE_MARGIN_S = 0.002
"""Added to the pace's wait: the device's moment has surely come when its target is asked for
again (the pace counts whole milliseconds of Redis' clock)."""
RECORD_GROUP_WAIT_S = 0.05
"""Longest an answered request waits for its group to be written."""

RecordGroup = Callable[[list[RecipientOutcome]], Awaitable[None]]
MayStart = Callable[[], Awaitable[bool]]


def backoff_s(attempt: int, retry_after_s: float | None) -> float:
    """Exponential backoff with full jitter, never shorter than FCM's ``Retry-After``."""
    jittered = random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(attempt, 32)))
    return max(retry_after_s or 0.0, jittered)


def never(_failure: BaseException) -> bool:
    return False


class NoPace:
    """No per-device pace (``HERALD_DEVICE_RATE_PER_MIN=0``): every message may start now."""

    async def reserve(self, tokens: Sequence[str]) -> list[float]:
        return [0.0] * len(tokens)

    async def hold(self, token: str, seconds: float) -> None:
        return None


NO_PACE = NoPace()


@dataclass(frozen=True)
class WindowPolicy:
    connections: int
    unrecorded: int
    max_retries: int
    group_wait_s: float = RECORD_GROUP_WAIT_S
    is_outage: Callable[[BaseException], bool] = never
    """Whether a failed write is an outage (the store away), to be tried again until it lands."""

    @property
    def group_size(self) -> int:
        """Outcomes per write: a quarter of the unrecorded bound, so that three groups can be
        on the wire or in writing while one fills."""
        return max(1, self.unrecorded // 4)


WRITE_RETRY_FIRST_S = 0.2
WRITE_RETRY_MAX_S = 5.0


class OutcomeGroups:
    """One chunk delivery's answered requests, written in groups, one write at a time.

    Each outcome holds a permit of the window until its group is written (or failed to be). A
    write that meets an outage is tried again until it lands (or the pod dies): FCM's answers
    are never dropped between FCM and the store, and while they wait, their permits keep the
    window from starting more than ``unrecorded`` requests. Any other failure stops the
    delivery (the chunk is handed back; its unrecorded part is sent again).
    """

    def __init__(self, record: RecordGroup, permits: LanePermits, size: int,
                 wait_s: float, is_outage: Callable[[BaseException], bool] = never) -> None:
        self._record = record
        self._permits = permits
        self._size = size
        self._wait_s = wait_s
        self._is_outage = is_outage
        self._pending: list[RecipientOutcome] = []
        self._timer: asyncio.TimerHandle | None = None
        self._writes: list[asyncio.Task[None]] = []
        self._writing = asyncio.Lock()
        self.failure: BaseException | None = None

    def add(self, outcome: RecipientOutcome) -> None:
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
        """Write the rest and wait for every write; raise the first write's failure.

        The writes are tasks of their own: if the delivery is cancelled (its channel closed
        under it), they still land (``asyncio.wait`` does not cancel what it waits for)."""
        self.flush()
        if self._writes:
            await asyncio.wait(self._writes)
        self._writes.clear()
        if self.failure is not None:
            raise self.failure

    async def _write(self, outcomes: list[RecipientOutcome]) -> None:
        try:
            async with self._writing:
                if self.failure is None:
                    await self._write_until_it_lands(outcomes)
        except Exception as exc:  # the chunk is handed back; its unrecorded part is resent
            self.failure = self.failure or exc
        finally:
            for _ in outcomes:
                self._permits.release()

    async def _write_until_it_lands(self, outcomes: list[RecipientOutcome]) -> None:
        pause = WRITE_RETRY_FIRST_S
        while True:
            try:
                await self._record(outcomes)
                return
            except Exception as exc:
                if not self._is_outage(exc):
                    raise
                log.warning("recording %d answers failed (%s); trying again in %.1f s",
                            len(outcomes), type(exc).__name__, pause)
            await asyncio.sleep(pause)
            pause = min(WRITE_RETRY_MAX_S, pause * 2)


def _body(delivery: _Delivery, target: Target, now_s: float) -> bytes:
    """The target's own message (a per-device campaign), else the shared one for its token,
    dated ``now_s``: the moment this request starts (a TTL's APNs expiry counts from it)."""
    if target.body is not None:
        return target.body.at(now_s)
    assert delivery.template is not None, "a per-device campaign's target without its body"
    return delivery.template.body_for(target.token, now_s)


Stop = Callable[[SendResult], None]
"""Told of an answer that stops the whole campaign (a configuration error)."""


@dataclass
class _Delivery:
    """What one chunk delivery sends through the window."""

    template: MessageTemplate | None
    """The message every target shares; None when each target carries its own body."""
    cancelled: asyncio.Event
    buckets: tuple[RateBucket, ...]
    """Where its requests take tokens, in order: the campaign's cap (if any), then its lane's
    share of the project's rate (``RateLimits.for_lane``)."""
    groups: OutcomeGroups
    stop: Stop
    fenced: Callable[[], bool]
    """True once this pod may no longer act for the delivery (it was away: see ``fence.py``)."""
    rank: int = Lane.STANDARD.rank
    """Its lane's rank: a full window starts the requests of the lowest rank first."""
    tokens: int = 0
    failure: BaseException | None = None
    in_window: int = 0
    """Admitted targets not finished yet: queued, on the wire, or waiting to be retried."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    def enter(self) -> None:
        self.in_window += 1
        self.settled.clear()

    def leave(self) -> None:
        self.in_window -= 1
        if self.in_window == 0:
            self.settled.set()

    def may_send(self) -> bool:
        """Asked right before a request's bytes leave: not cancelled, not fenced off."""
        return not (self.cancelled.is_set() or self.fenced())


class _Waiting:
    """A delivery's targets not admitted yet: those that may be asked for now, in order, and
    those the device pace put aside, by the moment their device may have the next message."""

    def __init__(self, targets: Iterable[Target]) -> None:
        self._now: deque[Target] = deque(targets)
        self._later: list[tuple[float, int, Target]] = []
        self._order = itertools.count()
        self._loop = asyncio.get_running_loop()

    def __bool__(self) -> bool:
        return bool(self._now or self._later)

    @property
    def ready(self) -> int:
        """How many may be asked for now."""
        return len(self._now)

    def take(self, count: int) -> list[Target]:
        return [self._now.popleft() for _ in range(min(count, len(self._now)))]

    def put_aside(self, target: Target, wait_s: float) -> None:
        due = self._loop.time() + wait_s + PACE_MARGIN_S
        heapq.heappush(self._later, (due, next(self._order), target))

    async def due(self, cancelled: asyncio.Event) -> bool:
        """Wait until one may be asked for (at once if one may); False if cancelled first."""
        self._return_due()
        if not self._now and self._later:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), self._later[0][0] - self._loop.time())
            self._return_due()
        return not cancelled.is_set()

    def _return_due(self) -> None:
        now = self._loop.time()
        while self._later and self._later[0][0] <= now:
            self._now.append(heapq.heappop(self._later)[2])


@dataclass(slots=True)
class _Try:
    """A target's next request: how many retries it had, and whether it already had a new
    OAuth token after a 401."""

    delivery: _Delivery
    target: Target
    attempt: int = 0
    reauthed: bool = False


class SendWindow:
    """The pod's requests to FCM: a sliding window shared by every chunk being sent.

    Admitted targets wait in one queue; up to ``connections`` runners take them in turn, each
    starting its next request as soon as its previous one is answered (a runner that finds the
    queue empty ends, and admission starts another). A freed connection so goes straight to the
    next request, without a task per request parked on a semaphore until a connection frees:
    measured with FCM faked to answer at once, 6.5 µs of the window's own CPU per request
    against 7.9-8.0 µs for a task per request; with the emulator 50 ms away
    (``bench.transport``, alternating runs) 0.075-0.078 CPU-ms per message against 0.083-0.098,
    the bare client 0.064-0.072.
    """

    def __init__(self, fcm: Fcm, policy: WindowPolicy, project_bucket: RateBucket,
                 wall_clock: Callable[[], float] = time.time, pace: DevicePace = NO_PACE) -> None:
        self._fcm = fcm
        self._pace = pace
        self._wall_clock = wall_clock
        self._policy = policy
        self._unrecorded = LanePermits(policy.unrecorded)
        self._project_bucket = project_bucket
        self._queues: tuple[deque[_Try], ...] = tuple(deque() for _ in LANES_FIRST_TO_LAST)
        self._queued = 0
        self._runners = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, template: MessageTemplate | None, targets: Sequence[Target], *,
                   may_start: MayStart, cancelled: asyncio.Event,
                   buckets: Sequence[RateBucket] | None = None, record: RecordGroup,
                   stop: Stop = lambda _result: None,
                   fenced: Callable[[], bool] = lambda: False,
                   lane: Lane = Lane.STANDARD) -> None:
        """Send to ``targets`` while ``may_start()`` allows, recording outcomes in groups.

        Each request takes a token from each of ``buckets`` (default: the project's rate), at
        most as many at once as there are targets left. When the window is full, requests of
        a more urgent ``lane`` start first.

        Returns once every request started here is answered and its outcome written; a target
        without an outcome (not admitted, or cancelled before it started) stays unsent. An answer
        that says the campaign itself is wrong (a configuration error) is recorded, passed to
        ``stop`` and sets ``cancelled``: nothing more of the campaign starts here.
        Raises the first failure to record (nothing more is started after it).
        """
        groups = OutcomeGroups(record, self._unrecorded, self._policy.group_size,
                               self._policy.group_wait_s, self._policy.is_outage)
        delivery = _Delivery(template, cancelled,
                             tuple(buckets) if buckets is not None else (self._project_bucket,),
                             groups, stop, fenced, rank=lane.rank)
        try:
            await self._admit(delivery, targets, may_start)
        finally:
            if delivery.in_window:
                await delivery.settled.wait()
            await groups.drain()
        if delivery.failure is not None:
            raise delivery.failure

    async def _admit(self, delivery: _Delivery, targets: Iterable[Target],
                     may_start: MayStart) -> None:
        """Tokens first, then the device pace, then a permit: a campaign waiting for its rate,
        or a target for its device, holds no permit another campaign could use. Whether the
        chunk may go on is asked again once the permit is there (a cancel, a pause or a
        shutdown may have come while it waited)."""
        waiting = _Waiting(targets)
        while block := await self._next_block(delivery, waiting):
            for target in block:
                await self._unrecorded.acquire(delivery.rank)
                if not await self._may_continue(delivery, may_start):
                    self._unrecorded.release()
                    return
                delivery.tokens -= 1
                delivery.enter()
                self._enqueue(_Try(delivery, target))

    async def _next_block(self, delivery: _Delivery, waiting: _Waiting) -> list[Target]:
        """The next targets whose devices may have a message now, at most as many as the
        delivery has tokens (taken first); those the pace puts aside wait in ``waiting``.
        Empty once none is left, or the delivery must stop."""
        while waiting:
            if not await waiting.due(delivery.cancelled):
                return []
            if not waiting.ready:  # woken a hair early
                continue
            if delivery.tokens == 0 and not await self._refill(delivery, waiting.ready):
                return []
            ready = await self._paced(waiting.take(delivery.tokens), waiting)
            if ready:
                return ready
        return []

    async def _paced(self, block: list[Target], waiting: _Waiting) -> list[Target]:
        """Of ``block``, the targets whose devices may have a message now (their moment moved
        on); the others are put aside until their device's moment."""
        waits = await self._pace.reserve([target.token for target in block])
        ready = []
        for target, wait_s in zip(block, waits, strict=True):
            if wait_s > 0:
                waiting.put_aside(target, wait_s)
            else:
                ready.append(target)
        if len(ready) < len(block):
            DEVICE_PACE_DEFERRED.inc(len(block) - len(ready))
        return ready

    async def _may_continue(self, delivery: _Delivery, may_start: MayStart) -> bool:
        if (delivery.failure or delivery.groups.failure or delivery.cancelled.is_set()
                or delivery.fenced()):
            return False
        return await may_start()

    async def _refill(self, delivery: _Delivery, ready: int) -> bool:
        """Take the delivery's next tokens: at most ``TOKEN_BLOCK``, and never more than it
        has targets ready; False if it must stop (or was cancelled while waiting).
        ``may_start`` is asked once per target, after its permit."""
        if delivery.failure or delivery.groups.failure or delivery.cancelled.is_set():
            return False
        delivery.tokens = await self._take_tokens(min(TOKEN_BLOCK, ready), delivery)
        return delivery.tokens > 0

    async def _take_tokens(self, count: int, delivery: _Delivery) -> int:
        """Up to ``count`` tokens from each of the delivery's buckets in turn (a capped
        campaign's bucket grants a tenth of a second's worth at a time)."""
        for bucket in delivery.buckets:
            if count == 0:
                return 0
            count = await bucket.take(count, delivery.cancelled)
        return count

    def _enqueue(self, attempt: _Try, *, first: bool = False) -> None:
        queue = self._queues[attempt.delivery.rank]
        if first:
            queue.appendleft(attempt)
        else:
            queue.append(attempt)
        self._queued += 1
        if self._runners < self._policy.connections:
            self._runners += 1
            self._spawn(self._run())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _next(self) -> _Try:
        """The next request to start: the most urgent lane's oldest."""
        self._queued -= 1
        for queue in self._queues:
            if queue:
                return queue.popleft()
        raise AssertionError("the window's count of queued requests is wrong")

    async def _run(self) -> None:
        """One connection's worth of requests, back to back, while any are queued."""
        try:
            while self._queued:
                await self._request(self._next())
        finally:
            self._runners -= 1

    async def _request(self, attempt: _Try) -> None:
        """One request for one target, and what its answer leads to: an outcome for its group
        (which gives the permit back once written), another try (which keeps it), or nothing
        (unsent: the permit goes back at once)."""
        delivery = attempt.delivery
        settled = True
        try:
            if delivery.cancelled.is_set() or delivery.fenced():
                self._unrecorded.release()  # cancelled, or fenced, before it started: unsent
                return
            started = time.perf_counter()
            body = _body(delivery, attempt.target, self._wall_clock())
            result = await self._fcm.send(body, delivery.may_send)
            FCM_REQUEST_SECONDS.observe(time.perf_counter() - started)
            settled = self._answered(attempt, result)
        except Exception as exc:
            delivery.failure = delivery.failure or exc
            self._unrecorded.release()
        finally:
            if settled:
                delivery.leave()

    def _answered(self, attempt: _Try, result: SendResult) -> bool:
        """File an answer; False while the target goes on (a retry holds its permit)."""
        delivery = attempt.delivery
        if result.withheld:
            self._unrecorded.release()  # never left: unsent
            return True
        if result.error is not None:
            FCM_ERRORS.labels(result.error).inc()
        kind = result.consequence
        if kind is Consequence.REAUTH and not attempt.reauthed:
            self._fcm.rejected(result)
            attempt.reauthed = True
            self._enqueue(attempt, first=True)  # at once, with the next token
            return False
        if kind is Consequence.RETRY and attempt.attempt < self._policy.max_retries:
            FCM_RETRIES.labels(result.error).inc()
            self._spawn(self._retry_later(attempt, result))
            return False
        if kind is Consequence.REAUTH or (kind is Consequence.RETRY and not result.attempted):
            result = replace(result, error=FcmError.UNAUTHENTICATED if kind is Consequence.REAUTH
                             else FcmError.OAUTH_REFUSED)
            kind = Consequence.STOP  # a fresh token did not help, or none could be had
        if result.attempted:
            delivery.groups.add(RecipientOutcome(attempt.target, result.error))
        else:
            self._unrecorded.release()  # no request left: unsent
        if kind is Consequence.STOP:
            delivery.stop(result)  # first: it tells the pod's cancel watch, which sets the event
            delivery.cancelled.set()
        return True

    async def _retry_later(self, attempt: _Try, result: SendResult) -> None:
        """Wait before retrying (a cancel cuts it short), take a token, queue the retry; a
        cancelled target leaves unsent."""
        delivery = attempt.delivery
        try:
            await self._back_off(attempt, result)
        except Exception as exc:
            delivery.failure = delivery.failure or exc
        if delivery.cancelled.is_set() or delivery.failure is not None or delivery.fenced():
            self._unrecorded.release()
            delivery.leave()
            return
        attempt.attempt += 1
        self._enqueue(attempt)

    async def _back_off(self, attempt: _Try, result: SendResult) -> None:
        """FCM's ``Retry-After`` holds the whole fleet, unless it is about one device: then
        that device alone waits (every campaign's messages to it), the rest goes on."""
        delivery = attempt.delivery
        wait_s = backoff_s(attempt.attempt, result.retry_after_s)
        if result.error in ONE_DEVICE:
            await self._pace.hold(attempt.target.token, wait_s)
            await self._device_moment(attempt)
        else:
            if result.retry_after_s:
                await self._project_bucket.penalize(result.retry_after_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(delivery.cancelled.wait(), wait_s)
        if not delivery.cancelled.is_set():
            await self._take_tokens(1, delivery)  # a retry is a request: it costs a token

    async def _device_moment(self, attempt: _Try) -> None:
        """Wait until the device's pace lets a message start (its hold first): a retry for a
        device FCM found over its rate is a message to it like any other."""
        cancelled = attempt.delivery.cancelled
        while not cancelled.is_set():
            [wait_s] = await self._pace.reserve([attempt.target.token])
            if wait_s <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), wait_s + PACE_MARGIN_S)
