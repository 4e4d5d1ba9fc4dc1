"""The ready depth of ``herald.chunks`` as RabbitMQ itself reports it, sampled while work runs:
what the dispatcher's backpressure bounds (benches and end-to-end tests read it alike)."""

from __future__ import annotations

import asyncio
import threading

import aio_pika

from devstack.stack import Stack
from herald import names


class QueueDepthSampler:
    """Samples the ready depth of ``herald.chunks`` from RabbitMQ itself (a passive declare,
    current to the message, as the stack's service user) every ``interval_s``, in a thread,
    while in its ``with`` block; a sampler that could not sample fails the bench."""

    def __init__(self, stack: Stack, interval_s: float = 0.05) -> None:
        self._url = stack.config.rabbitmq_url
        self._interval_s = interval_s
        self.depths: list[int] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._sample()), daemon=True)

    def __enter__(self) -> QueueDepthSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.error is not None or not self.depths:
            raise RuntimeError(f"the queue depth could not be sampled: {self.error!r}")

    async def _sample(self) -> None:
        try:
            await self._sample_until_stopped()
        except Exception as exc:
            self.error = exc

    async def _sample_until_stopped(self) -> None:
        connection = await aio_pika.connect(self._url)
        async with connection:
            channel = await connection.channel()
            while not self._stop.is_set():
                queue = await channel.declare_queue(names.CHUNKS_QUEUE, passive=True)
                self.depths.append(int(queue.declaration_result.message_count or 0))
                await asyncio.sleep(self._interval_s)
