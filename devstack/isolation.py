"""Private names for one stack: a MongoDB database, a RabbitMQ vhost (and, through the database
name, a Redis key namespace), so stacks started by tests and benches never see each other."""

from __future__ import annotations

import os
import subprocess
import uuid


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
