"""Private names for one stack: a MongoDB database, a RabbitMQ vhost (and, through the database
name, a Redis key namespace), so stacks started by tests and benches never see each other."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import redis
from pymongo import MongoClient

from devstack.processes import free_port
from devstack.stack import Stack, StackConfig


def unique_name(prefix: str = "herald_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _rabbitmqctl(*args: str) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    subprocess.run([*sudo, "rabbitmqctl", "-q", *args], check=True, capture_output=True,
                   timeout=60)


def create_vhost(name: str) -> str:
    """A private RabbitMQ vhost; the URL of guest on it."""
    _rabbitmqctl("add_vhost", name)
    _rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    return f"amqp://guest:guest@127.0.0.1:5672/{name}"


def delete_vhost(name: str) -> None:
    _rabbitmqctl("delete_vhost", name)


@contextlib.contextmanager
def private_stack(run_dir: Path, *, mongodb_port: int | None = None,
                  extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A stack of its own: database, vhost, Redis namespace and ports; all removed afterwards.

    With ``mongodb_port`` it uses that (shared) MongoDB server, else it starts its own
    nx-27017. The caller starts the processes it needs (``stack.start()`` for all).
    """
    database, vhost = unique_name(), unique_name()
    config = StackConfig(
        run_dir=run_dir, database=database, mongodb_port=mongodb_port or free_port(),
        start_mongodb=mongodb_port is None, rabbitmq_url=create_vhost(vhost),
        fcm_port=free_port(), api_port=free_port(), extra_env=dict(extra_env or {}))
    stack = Stack(config)
    try:
        yield stack
    finally:
        stack.stop(timeout_s=15)
        delete_vhost(vhost)
        if mongodb_port is not None:
            with MongoClient(config.mongodb_url) as client:
                client.drop_database(database)
        _forget_redis_namespace(config.redis_url, database)


def _forget_redis_namespace(redis_url: str, database: str) -> None:
    store = redis.Redis.from_url(redis_url)
    keys = list(store.scan_iter(match=f"herald:{database}:*"))
    if keys:
        store.delete(*keys)
    store.close()
