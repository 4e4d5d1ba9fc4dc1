"""RabbitMQ users of a Herald stack, with the narrowest permissions that let each do its job.

- The **service user** (``herald`` in Docker Compose): every Herald process connects as it. It may
  declare, publish to, bind and consume Herald's own exchanges and queues (``herald.*`` and the
  per-pod ``herald.cancel.<pod>`` queues) and publish through the default exchange (work queues
  are published to by name), and nothing else in the vhost.
- The **cancel user** (``herald-cancel`` in Docker Compose), for outside tools: it may publish to
  the ``herald.cancel`` exchange and do nothing else (configure ``^$``, write
  ``^herald\\.cancel$``, read ``^$``). A message it publishes with ``user_id`` set to its own name
  is a verified actor: RabbitMQ refuses a ``user_id`` that is not the connection's user.

The same definitions (users, vhost, permissions, the ``herald.cancel`` exchange) are what Docker
Compose loads at boot and what the local stacks import with ``rabbitmqctl import_definitions``
(one call) into a vhost of their own. Users are global to a broker, so a local stack's users are
named after its vhost and removed with it.

- ``python -m devstack.broker_users compose --out secrets/rabbitmq-definitions.json`` writes
  Compose's definitions with fresh random passwords and prints the ``.env`` lines that use them
  (``--dev``: the development passwords of ``deploy/rabbitmq/definitions.json``);
- ``python -m devstack.broker_users hash`` prints the RabbitMQ hash of the password on stdin.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from herald import names

SERVICE_USER = "herald"
CANCEL_USER = "herald-cancel"
COMPOSE_VHOST = "herald"
HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
PASSWORD_BYTES = 24
SALT_BYTES = 4
MANAGEMENT_TAG = "management"
"""Lets the cancel user publish through the management HTTP API (``rabbitmqadmin``): it can then
list the names and counters of its vhost's queues and exchanges, but read no message."""


def _anchored(*patterns: str) -> str:
    return "^(" + "|".join(patterns) + ")$"


def _literal(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9.-]+", name):  # Herald's names: nothing else to escape
        raise ValueError(f"unexpected character in the name {name!r}")
    return name.replace(".", r"\.")


def _exactly(*resource_names: str) -> list[str]:
    return [_literal(name) for name in resource_names]


POD_QUEUES = _literal(names.pod_cancel_queue("")) + ".+"
"""Every pod's own cancel queue, ``herald.cancel.<pod id>``."""
DEFAULT_EXCHANGE = "amq.default"
"""What RabbitMQ checks a publish to the default exchange (``""``) against."""
_EXCHANGES = (names.CANCEL_EXCHANGE, names.DEAD_LETTER_EXCHANGE)
_WORK_QUEUES = (names.DISPATCH_QUEUE, *names.CHUNK_QUEUES.values())
_DEAD_QUEUES = (names.DEAD_CHUNKS_QUEUE, names.DEAD_MESSAGES_QUEUE, names.DEAD_CANCELS_QUEUE)


@dataclass(frozen=True)
class Permissions:
    """A user's permissions in one vhost: regular expressions on resource names."""

    configure: str
    write: str
    read: str


SERVICE_PERMISSIONS = Permissions(
    # Declare: both exchanges, every queue, each pod its own queue.
    configure=_anchored(*_exactly(*_EXCHANGES, *_WORK_QUEUES, *_DEAD_QUEUES), POD_QUEUES),
    # Publish: cancels, dead letters, and work through the default exchange. Bind: the bound
    # queue is written to. Declaring a queue with a dead-letter exchange needs write on that.
    write=_anchored(*_exactly(*_EXCHANGES, DEFAULT_EXCHANGE, *_DEAD_QUEUES), POD_QUEUES),
    # Consume: the work queues, dead chunks, the pod's queue (``herald.dead`` is for people).
    # Bind: the exchange bound from is read. Declaring a queue with a dead-letter exchange needs
    # read on the queue itself.
    read=_anchored(*_exactly(*_EXCHANGES, *_WORK_QUEUES, names.DEAD_CHUNKS_QUEUE), POD_QUEUES),
)
CANCEL_PERMISSIONS = Permissions(configure="^$", write=f"^{_literal(names.CANCEL_EXCHANGE)}$",
                                 read="^$")
FULL_PERMISSIONS = Permissions(configure=".*", write=".*", read=".*")


@dataclass(frozen=True)
class BrokerUser:
    name: str
    password: str = field(repr=False)

    def url(self, vhost: str, host: str = "127.0.0.1", port: int = 5672) -> str:
        """``amqp://`` URL of this user on ``vhost``."""
        return (f"amqp://{quote(self.name, safe='')}:{quote(self.password, safe='')}"
                f"@{host}:{port}/{quote(vhost, safe='')}")


@dataclass(frozen=True)
class BrokerUsers:
    """The two users of a stack (or of a test session), with their passwords."""

    service: BrokerUser
    cancel: BrokerUser

    @classmethod
    def new(cls, suffix: str) -> BrokerUsers:
        """``herald-<suffix>`` and ``herald-cancel-<suffix>`` with fresh random passwords."""
        return cls(service=BrokerUser(f"{SERVICE_USER}-{suffix}", _new_password()),
                   cancel=BrokerUser(f"{CANCEL_USER}-{suffix}", _new_password()))

    def to_dict(self) -> dict[str, dict[str, str]]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, str]]) -> BrokerUsers:
        return cls(service=BrokerUser(**data["service"]), cancel=BrokerUser(**data["cancel"]))


def _new_password() -> str:
    return secrets.token_urlsafe(PASSWORD_BYTES)


def password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's stored form of ``password`` (``rabbit_password_hashing_sha256``): base64 of a
    4-byte salt followed by SHA-256(salt + password)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def hash_matches(password: str, stored: str) -> bool:
    """Whether ``stored`` (a ``password_hash``) is the hash of ``password``."""
    salt = base64.b64decode(stored)[:SALT_BYTES]
    return hmac.compare_digest(password_hash(password, salt), stored)


def _user(user: BrokerUser, tags: Sequence[str] = ()) -> dict[str, Any]:
    return {"name": user.name, "password_hash": password_hash(user.password),
            "hashing_algorithm": HASHING_ALGORITHM, "tags": list(tags)}


def _permission(user: str, vhost: str, permissions: Permissions) -> dict[str, str]:
    return {"user": user, "vhost": vhost, **asdict(permissions)}


def cancel_exchange(vhost: str) -> dict[str, Any]:
    """``herald.cancel`` exactly as the services declare it, so that outside tools can publish
    before any service has started (and a service's declaration of it still matches)."""
    return {"name": names.CANCEL_EXCHANGE, "vhost": vhost, "type": "fanout", "durable": True,
            "auto_delete": False, "internal": False, "arguments": {}}


def user_definitions(users: BrokerUsers) -> dict[str, Any]:
    """The two users alone (users are global: a test session makes them once)."""
    return {"users": [_user(users.service), _user(users.cancel, [MANAGEMENT_TAG])]}


DEAD_MESSAGES_MAX_LENGTH = 10_000
DEAD_MESSAGES_MAX_BYTES = 64 * 1024 * 1024


def dead_messages_policy(vhost: str) -> dict[str, Any]:
    """``herald.dead`` bounded: at most 10,000 messages and 64 MiB. Anyone who may publish a
    cancel can publish a malformed one, and each lands here; past the bound the oldest are
    dropped (``drop-head``): the newest are what an operator looking now needs, and a flood
    cannot stop the queue from taking the message that explains today's problem (with
    ``reject-publish`` a full queue would refuse every later one). Quorum queues support both
    limits and this overflow on RabbitMQ 3.10 and 4.x."""
    return {"vhost": vhost, "name": names.DEAD_MESSAGES_POLICY,
            "pattern": "^" + _literal(names.DEAD_MESSAGES_QUEUE) + "$", "apply-to": "queues",
            "priority": 10, "definition": {"max-length": DEAD_MESSAGES_MAX_LENGTH,
                                           "max-length-bytes": DEAD_MESSAGES_MAX_BYTES,
                                           "overflow": "drop-head"}}


DEAD_CANCELS_MAX_LENGTH = 1_000
DEAD_CANCELS_MAX_BYTES = 8 * 1024 * 1024


def dead_cancels_policy(vhost: str) -> dict[str, Any]:
    """``herald.dead.cancel`` bounded the same way, smaller: at most 1,000 messages and 8 MiB
    (a cancel message is at most 64 KiB: a larger one is dropped by the pods, not kept)."""
    return {"vhost": vhost, "name": names.DEAD_CANCELS_POLICY,
            "pattern": "^" + _literal(names.DEAD_CANCELS_QUEUE) + "$", "apply-to": "queues",
            "priority": 10, "definition": {"max-length": DEAD_CANCELS_MAX_LENGTH,
                                           "max-length-bytes": DEAD_CANCELS_MAX_BYTES,
                                           "overflow": "drop-head"}}


def vhost_definitions(vhost: str, users: BrokerUsers,
                      full_access: Sequence[str] = ()) -> dict[str, Any]:
    """A vhost with Herald's permissions for ``users`` (and every permission for each user
    named in ``full_access``, e.g. ``guest`` for a test's own tools), ``herald.cancel``, and
    the policy that bounds ``herald.dead``."""
    permissions = [_permission(users.service.name, vhost, SERVICE_PERMISSIONS),
                   _permission(users.cancel.name, vhost, CANCEL_PERMISSIONS)]
    permissions += [_permission(user, vhost, FULL_PERMISSIONS) for user in full_access]
    return {"vhosts": [{"name": vhost}], "permissions": permissions,
            "exchanges": [cancel_exchange(vhost)],
            "policies": [dead_messages_policy(vhost), dead_cancels_policy(vhost)]}


def stack_definitions(vhost: str, users: BrokerUsers,
                      full_access: Sequence[str] = ()) -> dict[str, Any]:
    """Everything a stack needs in the broker: users, vhost, permissions, ``herald.cancel``,
    the bound on ``herald.dead``."""
    return {**user_definitions(users), **vhost_definitions(vhost, users, full_access)}


def compose_definitions(service_password: str, cancel_password: str) -> dict[str, Any]:
    """What Docker Compose's RabbitMQ loads at boot: ``herald`` and ``herald-cancel`` on the
    vhost ``herald``, nothing else (no ``guest``: a node that loads definitions at boot makes
    no default user)."""
    users = BrokerUsers(service=BrokerUser(SERVICE_USER, service_password),
                        cancel=BrokerUser(CANCEL_USER, cancel_password))
    return stack_definitions(COMPOSE_VHOST, users)


# --- the local broker, through rabbitmqctl ------------------------------------------------------

def rabbitmqctl(*args: str, stdin: str | None = None) -> str:
    """Run ``rabbitmqctl -q``, through ``sudo -n`` unless this process is root; its output."""
    return subprocess.run(_rabbitmqctl_argv(*args), check=True, capture_output=True,
                          timeout=60, text=True, input=stdin).stdout


def _rabbitmqctl_argv(*args: str) -> list[str]:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    return [*sudo, "rabbitmqctl", "-q", *args]


def import_definitions(definitions: dict[str, Any]) -> None:
    """Apply ``definitions`` to the local broker in one ``rabbitmqctl`` call (read from stdin,
    so no password hash is ever written to a file)."""
    rabbitmqctl("import_definitions", "--format", "json", stdin=json.dumps(definitions))


def delete_users(users: BrokerUsers) -> None:
    """Remove both users (their permissions in every vhost go with them)."""
    run_together([["delete_user", users.service.name], ["delete_user", users.cancel.name]])


def run_together(commands: Sequence[Sequence[str]]) -> None:
    """Several ``rabbitmqctl`` commands at once (each one takes about a second to start);
    a user or vhost already gone is not an error."""
    running = [subprocess.Popen(_rabbitmqctl_argv(*command), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for command in commands]
    for command, process in zip(commands, running, strict=True):
        _, errors = process.communicate(timeout=60)
        if process.returncode != 0 and "does not exist" not in errors:
            raise RuntimeError(f"rabbitmqctl {' '.join(command)}: {errors.strip()}")


# --- command line --------------------------------------------------------------------------------

DEV_PASSWORDS = {SERVICE_USER: "herald", CANCEL_USER: "herald-cancel"}
"""The passwords of ``deploy/rabbitmq/definitions.json``: for a Compose stack on one machine,
whose broker is reachable only inside Compose's network. Anything else makes its own."""


def _compose(args: argparse.Namespace) -> int:
    if args.dev:
        service, cancel = DEV_PASSWORDS[SERVICE_USER], DEV_PASSWORDS[CANCEL_USER]
    else:
        service, cancel = _new_password(), _new_password()
    # Readable by all: the broker's user in the container must read the bind-mounted file, and
    # a salted hash of a random 192-bit password gives nothing away.
    args.out.write_text(json.dumps(compose_definitions(service, cancel), indent=2) + "\n")
    args.out.chmod(0o644)
    if not args.dev:  # Compose reads a bare relative path as a named volume: keep the ./
        mounted = args.out if args.out.is_absolute() else f"./{args.out}"
        print(f"HERALD_RABBITMQ_DEFINITIONS={mounted}\nHERALD_RABBITMQ_PASSWORD={service}\n"
              f"# {CANCEL_USER}'s password, for the tools that publish cancels (kept nowhere "
              f"else): {cancel}")
    return 0


def _hash(_: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        sys.exit("give the password on stdin")
    print(password_hash(password))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.broker_users", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    compose = commands.add_parser(
        "compose", help="RabbitMQ definitions for Docker Compose, with fresh passwords printed "
                        "as .env lines (append them to .env next to docker-compose.yml)")
    compose.add_argument("--out", type=Path, required=True, help="definitions file to write")
    compose.add_argument("--dev", action="store_true",
                         help="the development passwords of deploy/rabbitmq/definitions.json")
    compose.set_defaults(run=_compose)
    commands.add_parser("hash", help="RabbitMQ hash of the password on stdin").set_defaults(
        run=_hash)
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
