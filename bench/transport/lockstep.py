"""The sender's lock-step path before its sliding window, kept as ``bench.transport``'s baseline
row: sending one batch of a chunk to FCM: concurrent requests, retries on push-back, and a cancel
check before every single request.

The check before each request is a set lookup in memory, so the moment a cancel broadcast
arrives no new FCM request starts for that campaign; the requests already on the wire finish and
are recorded. That is what bounds "sent after cancel" to the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from herald.adapters.fcm import FcmClient
from herald.adapters.rate_limit import TokenBucket
from herald.domain.fcm_errors import SendResult
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.payload import MessageTemplate
from herald.observability import FCM_REQUEST_SECONDS, FCM_RETRIES
from herald.service_layer.sending.window import backoff_s


@dataclass
class BatchResult:
    outcomes: list[RecipientOutcome]
    stopped: bool
    """A cancel stopped the batch: recipients without an outcome stay unsent."""


class BatchSender:
    def __init__(self, fcm: FcmClient, concurrency: int, max_retries: int,
                 project_bucket: TokenBucket) -> None:
        self._fcm = fcm
        self._slots = asyncio.Semaphore(concurrency)
        self._max_retries = max_retries
        self._project_bucket = project_bucket

    async def send(self, template: MessageTemplate, targets: Sequence[Target],
                   cancelled: asyncio.Event, campaign_bucket: TokenBucket | None) -> BatchResult:
        outcomes: list[RecipientOutcome] = []
        todo = list(targets)
        for attempt in range(self._max_retries + 1):
            await self._take_tokens(len(todo), campaign_bucket, cancelled)
            results = await asyncio.gather(*(self._send_one(template, r, cancelled)
                                              for r in todo))
            retry, retry_after = self._sort(todo, results, outcomes,
                                            final=attempt == self._max_retries)
            if not retry or cancelled.is_set():
                return BatchResult(outcomes, stopped=cancelled.is_set())
            await self._back_off(attempt, retry_after, cancelled)
            todo = retry
        return BatchResult(outcomes, stopped=False)

    async def _take_tokens(self, count: int, campaign_bucket: TokenBucket | None,
                           cancelled: asyncio.Event) -> None:
        if campaign_bucket is not None:
            await campaign_bucket.take(count, cancelled)
        await self._project_bucket.take(count, cancelled)

    async def _send_one(self, template: MessageTemplate, target: Target,
                        cancelled: asyncio.Event) -> SendResult | None:
        async with self._slots:
            if cancelled.is_set():
                return None
            started = time.perf_counter()
            result = await self._fcm.send(template.body_for(target.token))
            FCM_REQUEST_SECONDS.observe(time.perf_counter() - started)
            return result

    @staticmethod
    def _sort(todo: list[Target], results: list[SendResult | None], outcomes: list[RecipientOutcome],
              *, final: bool) -> tuple[list[Target], float | None]:
        """File each answer: an outcome, or another try; the longest ``Retry-After`` seen."""
        retry: list[Target] = []
        retry_after: float | None = None
        for target, result in zip(todo, results, strict=True):
            if result is None:
                continue  # cancelled before the request started: unsent
            if result.retryable and not final:
                retry.append(target)
                FCM_RETRIES.labels(result.error).inc()
                retry_after = max(retry_after or 0.0, result.retry_after_s or 0.0) or retry_after
            else:
                outcomes.append(RecipientOutcome(target, result.error))
        return retry, retry_after

    async def _back_off(self, attempt: int, retry_after_s: float | None,
                        cancelled: asyncio.Event) -> None:
        """Wait before retrying; a cancel cuts the wait short."""
        if retry_after_s:
            await self._project_bucket.penalize(retry_after_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cancelled.wait(), backoff_s(attempt, retry_after_s))
