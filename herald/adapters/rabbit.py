"""RabbitMQ topology and publishing, through FastStream (aio-pika underneath).

Work queues are quorum queues: replicated on a cluster, with a delivery limit as the last guard
against a message that kills every consumer it reaches. Herald also counts attempts itself (in the
chunk's MongoDB document), because RabbitMQ 3.10 and 4.x count redeliveries differently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from faststream import AckPolicy
from faststream.message import StreamMessage
from faststream.rabbit import (
    Channel,
    ExchangeType,
    QueueType,
    RabbitBroker,
    RabbitExchange,
    RabbitQueue,
)
from faststream.rabbit.message import RabbitMessage
from faststream.rabbit.schemas.queue import ClassicQueueArgs, QuorumQueueArgs
from pydantic import BaseModel, ValidationError

from herald import names
from herald.domain.lanes import Route
from herald.domain.messages import CancelCampaign, DispatchCampaign, SendChunk
from herald.settings import Settings

log = logging.getLogger(__name__)

QUEUE_DELIVERY_LIMIT = 20
"""Broker-side backstop; Herald's own attempt limit (``HERALD_CHUNK_MAX_ATTEMPTS``) acts first."""

CANCEL_PREFETCH = 32
"""Cancel messages a pod takes at once from its own queue (each is handled in milliseconds)."""
DEAD_LETTER_PREFETCH = 1

CANCEL_EXCHANGE = RabbitExchange(names.CANCEL_EXCHANGE, type=ExchangeType.FANOUT, durable=True)
DEAD_LETTER_EXCHANGE = RabbitExchange(
    names.DEAD_LETTER_EXCHANGE, type=ExchangeType.DIRECT, durable=True
)


def _work_queue(name: str, dead_letter_key: str) -> RabbitQueue:
    arguments: QuorumQueueArgs = {
        "x-delivery-limit": QUEUE_DELIVERY_LIMIT,
        "x-dead-letter-exchange": names.DEAD_LETTER_EXCHANGE,
        "x-dead-letter-routing-key": dead_letter_key,
    }
    return RabbitQueue(name, queue_type=QueueType.QUORUM, durable=True, arguments=arguments)


CHUNK_QUEUES = {Route(route): _work_queue(name, names.DEAD_CHUNKS_ROUTING_KEY)
                for route, name in names.CHUNK_QUEUES.items()}
"""One work queue per route: a lane's chunks, and the capped campaigns' (``paced``)."""
CHUNKS_QUEUE = CHUNK_QUEUES[Route.STANDARD]
DISPATCH_QUEUE = _work_queue(names.DISPATCH_QUEUE, names.DEAD_MESSAGES_ROUTING_KEY)
DEAD_CHUNKS_QUEUE = RabbitQueue(
    names.DEAD_CHUNKS_QUEUE, queue_type=QueueType.QUORUM, durable=True,
    routing_key=names.DEAD_CHUNKS_ROUTING_KEY,
)
DEAD_MESSAGES_QUEUE = RabbitQueue(
    names.DEAD_MESSAGES_QUEUE, queue_type=QueueType.QUORUM, durable=True,
    routing_key=names.DEAD_MESSAGES_ROUTING_KEY,
)
DEAD_CANCELS_QUEUE = RabbitQueue(
    names.DEAD_CANCELS_QUEUE, queue_type=QueueType.QUORUM, durable=True,
    routing_key=names.DEAD_CANCELS_ROUTING_KEY,
)


def pod_cancel_queue(pod_id: str) -> RabbitQueue:
    """The pod's own queue on the cancel fanout: gone when the pod's connection goes."""
    arguments: ClassicQueueArgs = {
        "x-dead-letter-exchange": names.DEAD_LETTER_EXCHANGE,
        "x-dead-letter-routing-key": names.DEAD_CANCELS_ROUTING_KEY,
    }
    return RabbitQueue(names.pod_cancel_queue(pod_id), durable=False, exclusive=True,
                       auto_delete=True, arguments=arguments)


def make_broker(settings: Settings, *, graceful_timeout_s: float | None = None) -> RabbitBroker:
    """Broker for the stack's vhost (taken from the URL), with publisher confirms."""
    return RabbitBroker(
        settings.rabbitmq_url,
        graceful_timeout=graceful_timeout_s,
        reconnect_interval=1.0,
        logger=logging.getLogger("herald.amqp"),
    )


async def undecoded(message: StreamMessage[Any]) -> bytes:
    """A FastStream decoder that leaves the body as bytes.

    Herald validates every message in its handler, so a malformed one is rejected (dead-lettered)
    with a log line; decoding inside the framework would fail before the handler runs and leave
    the message unsettled.
    """
    return message.body


Handler = Callable[[RabbitMessage], Awaitable[None]]
Command = TypeVar("Command", bound=BaseModel)

REDELIVERY_PAUSE_S = 1.0
"""Pause before handing a message back after a failure, so an outage is not a hot loop."""


FirstCopy = Callable[[bytes], Awaitable[bool]]
"""Whether this pod is the first to see a body that every pod receives (a broadcast)."""


async def _every_copy(_: bytes) -> bool:
    return True


async def execute(message: RabbitMessage, kind: type[Command],
                  work: Callable[[Command], Awaitable[None]],
                  first_copy: FirstCopy = _every_copy) -> None:
    """Validate a command message, do ``work`` with it, then settle the message.

    A message that is not a valid ``kind`` is logged (what was wrong, never its body) and
    rejected (dead-lettered), once: on a broadcast, where every pod holds a copy, the pods that
    are not its ``first_copy`` drop theirs quietly. One whose work fails is handed back after a
    pause; otherwise it is acknowledged.
    """
    try:
        command = kind.model_validate_json(message.body)
    except ValidationError as exc:
        await _dead_letter(message, kind, exc, first_copy)
        return
    try:
        await work(command)
    except Exception:
        log.exception("%s failed here; handing the message back", kind.__name__)
        await asyncio.sleep(REDELIVERY_PAUSE_S)
        await message.nack(requeue=True)
        return
    await message.ack()


async def _dead_letter(message: RabbitMessage, kind: type[Command], error: ValidationError,
                       first_copy: FirstCopy) -> None:
    try:
        first = await first_copy(message.body)
    except Exception:  # Redis is down: a copy per pod beats none
        log.warning("could not tell whether another pod dead-lettered this message first",
                    exc_info=True)
        first = True
    if not first:
        await message.ack()
        return
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                         for e in error.errors(include_url=False, include_input=False)[:5])
    log.warning("malformed %s message (%d bytes) dead-lettered: %s", kind.__name__,
                len(message.body), problems[:500])
    await message.reject(requeue=False)


def consume(broker: RabbitBroker, queue: RabbitQueue, handler: Handler, *, prefetch: int,
            exchange: RabbitExchange | None = None) -> None:
    """Register ``handler`` on ``queue``, on a channel of its own limited to ``prefetch``
    unacknowledged messages; the handler settles (acks, rejects) every message itself.

    One channel per consumer: a broadcast cancel never waits behind a window of work, and the
    prefetch is the consumer's alone. The subscriber declares its queue on that channel when the
    broker starts, which is why ``declare_topology`` runs after ``broker.start()``: FastStream's
    declarer caches a queue by its definition, so a queue declared earlier through
    ``broker.declare_queue`` would be consumed on the broker's default channel, which has no
    prefetch limit (RabbitMQ reports prefetch 0 and delivers the whole queue to one consumer).
    """
    channel = Channel(prefetch_count=prefetch)
    broker.subscriber(queue, exchange, channel=channel, ack_policy=AckPolicy.MANUAL,
                      decoder=undecoded)(handler)


async def declare_topology(broker: RabbitBroker) -> None:
    """Declare every durable exchange and queue, and bind the dead-letter queues (idempotent;
    each service does it at start, after its own consumers have declared their queues)."""
    await broker.declare_exchange(CANCEL_EXCHANGE)
    dead_letters = await broker.declare_exchange(DEAD_LETTER_EXCHANGE)
    for queue in (DEAD_CHUNKS_QUEUE, DEAD_MESSAGES_QUEUE, DEAD_CANCELS_QUEUE):
        declared = await broker.declare_queue(queue)
        await declared.bind(dead_letters, routing_key=queue.routing_key)
    for queue in CHUNK_QUEUES.values():
        await broker.declare_queue(queue)
    await broker.declare_queue(DISPATCH_QUEUE)


class RabbitBus:
    """Publishes Herald's commands; every publish waits for the broker's confirm."""

    def __init__(self, broker: RabbitBroker) -> None:
        self._broker = broker

    async def send_chunk(self, message: SendChunk) -> None:
        """Publish a chunk to its route's queue."""
        # Absent fields left out: a plain campaign's recipients stay ``token`` and ``user_id``.
        body = message.model_dump_json(exclude_none=True).encode()
        await self._broker.publish(body, queue=CHUNK_QUEUES[message.queue_route], persist=True,
                                   content_type="application/json")

    async def chunks_ready(self, route: Route = Route.STANDARD) -> int:
        """Chunk messages waiting in ``route``'s queue, ready and not yet delivered to a sender.

        Read from the broker's answer to a (re)declare of the queue: current to the message,
        unlike ``rabbitmqctl list_queues`` and the management API, which lag by seconds for
        quorum queues.
        """
        queue = await self._broker.declare_queue(CHUNK_QUEUES[route])
        declared = await queue.declare()
        return int(declared.message_count or 0)

    async def request_dispatch(self, campaign_id: str) -> None:
        await self._broker.publish(
            DispatchCampaign(campaign_id=campaign_id), queue=DISPATCH_QUEUE, persist=True
        )

    async def broadcast_cancel(self, message: CancelCampaign) -> None:
        await self._broker.publish(message, exchange=CANCEL_EXCHANGE)

    async def dead_letter(self, body: bytes, routing_key: str) -> None:
        """Put a message body on a dead-letter queue (``names.DEAD_*_ROUTING_KEY``)."""
        await self._broker.publish(body, exchange=DEAD_LETTER_EXCHANGE, routing_key=routing_key,
                                   persist=True)
