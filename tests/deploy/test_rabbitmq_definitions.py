"""Docker Compose's broker users (issue 10), checked without a Docker engine: the definitions file
RabbitMQ loads at boot is exactly what ``devstack.broker_users`` gives every local and test stack
(whose permissions the integration tests exercise on a real broker), its password hashes are
those of the documented development passwords, and nothing in Compose uses ``guest``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from devstack import broker_users
from devstack.broker_users import (
    CANCEL_PERMISSIONS,
    CANCEL_USER,
    COMPOSE_VHOST,
    DEV_PASSWORDS,
    SERVICE_PERMISSIONS,
    SERVICE_USER,
    compose_definitions,
    hash_matches,
    password_hash,
)

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS_FILE = REPO / "deploy" / "rabbitmq" / "definitions.json"
CONF_FILE = REPO / "deploy" / "rabbitmq" / "rabbitmq.conf"
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
RABBITMQ = COMPOSE["services"]["rabbitmq"]
DEFINITIONS: dict[str, Any] = json.loads(DEFINITIONS_FILE.read_text())


def _without_hashes(definitions: dict[str, Any]) -> dict[str, Any]:
    users = [{k: v for k, v in user.items() if k != "password_hash"}
             for user in definitions["users"]]
    return {**definitions, "users": users}


def _plain(value: str) -> str:
    """A Compose value as a plain `docker compose up` sees it (no variable set)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def _mounts() -> dict[str, str]:
    """Container path → host path (or volume) of the broker's mounts."""
    mounts = {}
    for volume in RABBITMQ["volumes"]:
        source, target, *_ = _plain(volume).split(":")
        mounts[target] = source
    return mounts


def test_the_definitions_are_the_stacks_definitions_with_the_development_passwords() -> None:
    expected = compose_definitions(DEV_PASSWORDS[SERVICE_USER], DEV_PASSWORDS[CANCEL_USER])
    assert _without_hashes(DEFINITIONS) == _without_hashes(expected)
    for user in DEFINITIONS["users"]:
        assert hash_matches(DEV_PASSWORDS[user["name"]], user["password_hash"]), user["name"]


def test_only_the_two_herald_users_exist_and_the_cancel_user_may_only_write_herald_cancel() -> None:
    assert {user["name"] for user in DEFINITIONS["users"]} == {SERVICE_USER, CANCEL_USER}
    permissions = {p["user"]: (p["vhost"], p["configure"], p["write"], p["read"])
                   for p in DEFINITIONS["permissions"]}
    assert permissions == {
        SERVICE_USER: (COMPOSE_VHOST, SERVICE_PERMISSIONS.configure, SERVICE_PERMISSIONS.write,
                       SERVICE_PERMISSIONS.read),
        CANCEL_USER: (COMPOSE_VHOST, "^$", r"^herald\.cancel$", "^$"),
    }
    assert CANCEL_PERMISSIONS.write == r"^herald\.cancel$"


def test_the_broker_loads_the_definitions_at_boot_from_the_mounted_file() -> None:
    mounts = _mounts()
    conf_target = next(t for t, s in mounts.items() if s == "./deploy/rabbitmq/rabbitmq.conf")
    assert conf_target.startswith("/etc/rabbitmq/conf.d/") and conf_target.endswith(".conf")
    (loaded,) = re.findall(r"^load_definitions\s*=\s*(\S+)\s*$", CONF_FILE.read_text(), re.M)
    assert mounts[loaded] == "./deploy/rabbitmq/definitions.json"
    assert "environment" not in RABBITMQ, "RABBITMQ_DEFAULT_* users would bypass the definitions"


def test_the_services_connect_as_the_service_user_on_the_herald_vhost() -> None:
    url = COMPOSE["x-herald-environment"]["HERALD_RABBITMQ_URL"]
    parts = urlsplit(_plain(url))
    assert (parts.username, unquote(parts.path.lstrip("/"))) == (SERVICE_USER, COMPOSE_VHOST)
    (service,) = [u for u in DEFINITIONS["users"] if u["name"] == SERVICE_USER]
    assert parts.password is not None and hash_matches(parts.password, service["password_hash"])


def test_guest_is_used_by_nothing_in_compose() -> None:
    assert "guest" not in json.dumps(COMPOSE)  # every value (comments may say why there is none)


def test_the_healthcheck_waits_for_herald_s_users() -> None:
    test = " ".join(RABBITMQ["healthcheck"]["test"])
    assert "check_port_connectivity" in test and f"-p {COMPOSE_VHOST}" in test
    assert CANCEL_USER in test


def test_fresh_compose_definitions_carry_the_passwords_printed_for_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert broker_users.main(["compose", "--out", "rabbitmq-definitions.json"]) == 0
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines()
                 if not line.startswith("#"))
    assert lines["HERALD_RABBITMQ_DEFINITIONS"] == "./rabbitmq-definitions.json"
    written = json.loads((tmp_path / "rabbitmq-definitions.json").read_text())
    (service,) = [u for u in written["users"] if u["name"] == SERVICE_USER]
    assert hash_matches(lines["HERALD_RABBITMQ_PASSWORD"], service["password_hash"])
    assert not hash_matches(DEV_PASSWORDS[SERVICE_USER], service["password_hash"])


def test_a_password_hash_is_salted_and_checks_only_its_password() -> None:
    first, second = password_hash("s3cret"), password_hash("s3cret")
    assert first != second  # a fresh salt each time
    assert hash_matches("s3cret", first) and hash_matches("s3cret", second)
    assert not hash_matches("s3cret!", first)
