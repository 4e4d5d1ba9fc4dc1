"""Issue 31, point 5, end to end: the cancel channel is bounded in size. The cancel publisher's
own credential (``herald-cancel-<vhost>``, what an outside tool is given) publishes a cancel of
1 MiB to ``herald.cancel`` on the shared fleet: every pod's queue gets it, one pod logs one short
line, nothing reaches either dead-letter queue, and a cancel published after it is still obeyed
(the pods read on)."""

from __future__ import annotations

import aio_pika
import orjson
import pytest
import uvloop

from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald import names
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

HUGE = b'{"campaign_id": "6b0137d0eaff6ead39685496", "reason": "%s"}' % (b"x" * (1 << 20))
WORKERS = ("api", "dispatcher", "sender-1", "sender-2")


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _publish(url: str, body: bytes) -> None:
    async def publish() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.get_exchange(names.CANCEL_EXCHANGE, ensure=False)
            await exchange.publish(aio_pika.Message(body), routing_key="")
    uvloop.run(publish())


def _dead_letters(url: str) -> tuple[int, int]:
    async def count() -> tuple[int, int]:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            counts = []
            for name in (names.DEAD_CANCELS_QUEUE, names.DEAD_MESSAGES_QUEUE):
                queue = await channel.declare_queue(name, passive=True)
                counts.append(int(queue.declaration_result.message_count or 0))
            return counts[0], counts[1]
    return uvloop.run(count())


def test_a_cancel_of_a_mebibyte_from_the_cancel_user_is_dropped_with_one_short_line(
        stack: Stack, fleet: Fleet, api: Api, emulator: EmulatorClient) -> None:
    config = stack.config
    assert config.cancel_rabbitmq_url is not None
    logs = {name: stack.processes[name].log_path for name in WORKERS}
    offsets = {name: path.stat().st_size for name, path in logs.items()}
    kept = _dead_letters(config.rabbitmq_url)

    _publish(config.cancel_rabbitmq_url, HUGE)
    emulator.configure(latency_ms=20)
    _, audience = fleet.import_own(api, reachable_devices(4_000))
    campaign_id = api.create_campaign(audience=audience)
    wait_for(lambda: api.campaign(campaign_id)["counts"]["sent"] > 0, 30, "the campaign to send")
    _publish(config.cancel_rabbitmq_url, orjson.dumps({
        "campaign_id": campaign_id, "reason": "after the huge one", "requested_by": "tool"}))
    finished = api.wait_finished(campaign_id, timeout_s=30)

    assert finished["status"] == "cancelled", "every pod read on past the huge message"
    assert finished["cancel"]["reason"] == "after the huge one"
    lines = [line for name, path in logs.items()
             for line in path.read_bytes()[offsets[name]:].decode(errors="replace").splitlines()
             if "dropped" in line]
    assert len(lines) == 1 and len(lines[0]) < 300, lines
    assert str(len(HUGE)) in lines[0] and "xxxx" not in lines[0]
    assert _dead_letters(config.rabbitmq_url) == kept, "neither dead-letter queue took it"
