"""Private names for one stack: a MongoDB database, a RabbitMQ vhost with its own broker users
(and, through the database name, a Redis key namespace), so stacks started by tests and benches
never see each other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aio_pika
import redis
from pymongo import MongoClient

from devstack.broker_users import (
    FULL_PERMISSIONS,
    BrokerUsers,
    import_definitions,
    rabbitmqctl,
    run_together,
    stack_definitions,
    vhost_definitions,
)
from devstack.processes import free_port
from devstack.stack import Stack, StackConfig
from herald import names
from herald.names import RedisKeys


def unique_name(prefix: str = "herald_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


GUEST = "guest"


def broker_report(vhost: str, what: str, *columns: str) -> list[dict[str, str]]:
    """What RabbitMQ itself reports for a vhost, e.g. ``broker_report(v, "list_consumers",
    "queue_name", "channel_pid", "prefetch_count")``: one dict per row, values as printed."""
    out = rabbitmqctl(what, "-p", vhost, "--no-table-headers", *columns)
    return [dict(zip(columns, line.split("\t"), strict=True))
            for line in out.splitlines() if line.strip()]


def create_vhost(name: str, users: BrokerUsers | None = None) -> str:
    """A private RabbitMQ vhost where guest has every permission and ``users`` (made
    beforehand), if given, Herald's; the URL of guest on it, for a test's own tools."""
    if users is None:
        import_definitions({"vhosts": [{"name": name}], "permissions": [
            {"user": GUEST, "vhost": name, **asdict(FULL_PERMISSIONS)}]})
    else:
        import_definitions(vhost_definitions(name, users, full_access=[GUEST]))
    return f"amqp://{GUEST}:{GUEST}@127.0.0.1:5672/{name}"


def delete_vhost(name: str) -> None:
    rabbitmqctl("delete_vhost", name)


def create_stack_broker(vhost: str) -> BrokerUsers:
    """A vhost with users of its own (``herald-<vhost>``, ``herald-cancel-<vhost>``): one call."""
    users = BrokerUsers.new(vhost)
    import_definitions(stack_definitions(vhost, users))
    return users


def delete_stack_broker(vhost: str, users: BrokerUsers) -> None:
    """The vhost and its users, removed together."""
    run_together([["delete_vhost", vhost], ["delete_user", users.service.name],
                  ["delete_user", users.cancel.name]])


class VhostPool:
    """Private vhosts for a test session, made a batch at a time in one ``rabbitmqctl`` call and
    reused: a vhost given back is emptied of Herald's queues and dead-letter exchange over AMQP
    (milliseconds) before the next test gets it. Making and deleting a vhost for every test cost
    about 1.5 s of ``rabbitmqctl`` each (an Erlang VM starts per call), most of the suite's time.

    ``users`` (made beforehand) get Herald's permissions in every vhost, ``guest`` every
    permission (a test's own tools connect as guest).
    """

    BATCH = 6
    _HERALD_QUEUES = (*names.CHUNK_QUEUES.values(), names.DISPATCH_QUEUE,
                      names.DEAD_CHUNKS_QUEUE, names.DEAD_MESSAGES_QUEUE, names.DEAD_CANCELS_QUEUE)

    def __init__(self, users: BrokerUsers, prefix: str = "herald_pool") -> None:
        self.users = users
        self._prefix = prefix
        self._free: list[str] = []
        self._made: list[str] = []
        self._lock = threading.Lock()

    def acquire(self) -> str:
        """A clean vhost of the pool (a new batch is made when none is free)."""
        with self._lock:
            if not self._free:
                batch = [unique_name(self._prefix) for _ in range(self.BATCH)]
                import_definitions(_merged([vhost_definitions(v, self.users, full_access=[GUEST])
                                            for v in batch]))
                self._made += batch
                self._free += batch
            return self._free.pop()

    def release(self, vhost: str) -> None:
        """Empty ``vhost`` of what Herald declared in it, and give it back."""
        asyncio.run(_empty(guest_url(vhost), self._HERALD_QUEUES))
        with self._lock:
            self._free.append(vhost)

    def close(self) -> None:
        """Delete every vhost the pool made."""
        run_together([["delete_vhost", vhost] for vhost in self._made])
        self._made, self._free = [], []


def guest_url(vhost: str) -> str:
    return f"amqp://{GUEST}:{GUEST}@127.0.0.1:5672/{vhost}"


async def _empty(url: str, queues: tuple[str, ...]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        await channel.exchange_delete(names.DEAD_LETTER_EXCHANGE)


def _merged(definitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Several definitions documents as one (their lists concatenated)."""
    merged: dict[str, list[Any]] = {}
    for document in definitions:
        for key, items in document.items():
            merged.setdefault(key, []).extend(items)
    return merged


BROKER_FILE = "broker.json"


def dev_broker(run_dir: Path) -> tuple[str, BrokerUsers]:
    """The ``make up`` stack's vhost and users: made the first time and kept in
    ``<run_dir>/broker.json`` (readable by its owner only), applied to the broker again at every
    start (idempotent: the broker may have been reset since)."""
    path = run_dir / BROKER_FILE
    if not path.exists():
        vhost = unique_name("herald_dev")
        run_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps({"vhost": vhost, "users": BrokerUsers.new(vhost).to_dict()},
                                   indent=2))
    saved = json.loads(path.read_text())
    vhost, users = saved["vhost"], BrokerUsers.from_dict(saved["users"])
    import_definitions(stack_definitions(vhost, users))
    return vhost, users


def forget_dev_broker(run_dir: Path) -> str | None:
    """Remove the ``make up`` stack's vhost and users from the broker; the vhost, if any."""
    path = run_dir / BROKER_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    delete_stack_broker(saved["vhost"], BrokerUsers.from_dict(saved["users"]))
    path.unlink()
    return str(saved["vhost"])


@contextlib.contextmanager
def private_stack(run_dir: Path, *, mongodb_port: int | None = None,
                  extra_env: dict[str, str] | None = None,
                  pool: VhostPool | None = None) -> Iterator[Stack]:
    """A stack of its own: database, vhost and its broker users (the services connect as the
    service user), Redis namespace and ports; all removed afterwards.

    With ``mongodb_port`` it uses that (shared) MongoDB server, else it starts its own
    nx-27017. With ``pool``, its vhost (and the pool's users) come from the pool and go back to
    it. The caller starts the processes it needs (``stack.start()`` for all).
    """
    database = unique_name()
    with _stack_broker(pool) as (vhost, users):
        yield from _private_stack(run_dir, database, vhost, users, mongodb_port, extra_env)


@contextlib.contextmanager
def _stack_broker(pool: VhostPool | None) -> Iterator[tuple[str, BrokerUsers]]:
    if pool is not None:
        vhost = pool.acquire()
        try:
            yield vhost, pool.users
        finally:
            pool.release(vhost)
        return
    vhost = unique_name()
    users = create_stack_broker(vhost)
    try:
        yield vhost, users
    finally:
        delete_stack_broker(vhost, users)


def _private_stack(run_dir: Path, database: str, vhost: str, users: BrokerUsers,
                   mongodb_port: int | None,
                   extra_env: dict[str, str] | None) -> Iterator[Stack]:
    config = StackConfig(
        run_dir=run_dir, database=database, mongodb_port=mongodb_port or free_port(),
        start_mongodb=mongodb_port is None, rabbitmq_url=users.service.url(vhost),
        cancel_rabbitmq_url=users.cancel.url(vhost), fcm_port=free_port(),
        api_port=free_port(), extra_env=dict(extra_env or {}))
    stack = Stack(config)
    try:
        yield stack
    finally:
        stack.stop(timeout_s=15)
        if mongodb_port is not None:
            with MongoClient(config.mongodb_url, document_class=dict) as client:
                client.drop_database(database)
        _forget_redis_namespace(config.redis_url, database)


def _forget_redis_namespace(redis_url: str, database: str) -> None:
    store = redis.Redis.from_url(redis_url)
    keys = list(store.scan_iter(match=RedisKeys(database).everything()))
    if keys:
        store.delete(*keys)
    store.close()
