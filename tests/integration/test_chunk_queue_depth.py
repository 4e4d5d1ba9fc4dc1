"""The dispatcher's backpressure reads ``herald.chunks``' ready depth from RabbitMQ itself: a
confirmed publish shows at once, a delivered (even unacknowledged) chunk no longer counts."""

from __future__ import annotations

import aio_pika

from herald import names
from herald.domain.messages import Recipient, SendChunk
from herald.runtime.worker import running_pod
from herald.settings import Settings
from tests.support import eventually


def chunk(seq: int) -> SendChunk:
    return SendChunk(campaign_id="c" * 24, seq=seq,
                     recipients=[Recipient(token=f"tok-{seq}", user_id=None)])


async def test_the_ready_depth_counts_confirmed_chunks_not_those_a_sender_holds(
        broker_settings: Settings, vhost: str) -> None:
    async with running_pod("dispatcher", broker_settings, acknowledges_cancels=False) as (pod, _):
        bus = pod.resources.bus
        assert await bus.chunks_ready() == 0
        for seq in range(3):
            await bus.send_chunk(chunk(seq))
        assert await bus.chunks_ready() == 3  # no lag: the publishes were confirmed
        connection = await aio_pika.connect(vhost)
        async with connection:
            channel = await connection.channel()
            queue = await channel.get_queue(names.CHUNKS_QUEUE, ensure=False)
            held = await queue.get(no_ack=False)
            assert await bus.chunks_ready() == 2  # delivered, not yet acknowledged
            await held.reject(requeue=True)

        async def requeued() -> bool:
            return await bus.chunks_ready() == 3

        await eventually(requeued, timeout_s=10, what="the rejected chunk to be ready again")
