"""TLS forms of the three store URLs (issue 10): accepted with the files they name, refused at start
when a file is missing or the URL is not a TLS one (the option would be ignored or fail on first
use). The connections themselves are tested in tests/integration/test_tls.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from herald.settings import Settings

EMULATOR = "http://127.0.0.1:8099"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HERALD_"):
            monkeypatch.delenv(name)


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")  # only its existence is checked here
    return path


def settings(**urls: str) -> Settings:
    return Settings(fcm_endpoint=EMULATOR, **urls)  # type: ignore[arg-type]


def refusal(**urls: str) -> str:
    with pytest.raises(ValidationError) as caught:
        settings(**urls)
    return str(caught.value)


def test_tls_urls_naming_existing_files_are_accepted(ca: Path) -> None:
    configured = settings(
        mongodb_url=f"mongodb://db.internal:27017/herald?tls=true&tlsCAFile={ca}",
        rabbitmq_url=f"amqps://herald:pw@mq.internal:5671/herald?cafile={ca}&certfile={ca}"
                     f"&keyfile={ca}",
        redis_url=f"rediss://redis.internal:6380/0?ssl_ca_certs={ca}&ssl_cert_reqs=required")
    assert configured.mongodb_database == "herald"
    assert configured.rabbitmq_url.startswith("amqps://")


@pytest.mark.parametrize(("field", "url", "message"), [
    ("mongodb_url", "mongodb://db:27017/herald?tls=true&tlsCAFile={missing}",
     "HERALD_MONGODB_URL: tlscafile={missing}: no such file"),
    ("mongodb_url", "mongodb://db:27017/herald?tls=true&TLSCertificateKeyFile={missing}",
     "tlscertificatekeyfile={missing}: no such file"),
    ("rabbitmq_url", "amqps://u:p@mq:5671/herald?cafile={missing}",
     "HERALD_RABBITMQ_URL: cafile={missing}: no such file"),
    ("rabbitmq_url", "amqps://u:p@mq:5671/herald?capath={missing}",
     "capath={missing}: no such directory"),
    ("redis_url", "rediss://redis:6380/0?ssl_ca_certs={missing}",
     "HERALD_REDIS_URL: ssl_ca_certs={missing}: no such file"),
    ("redis_url", "rediss://redis:6380/0?ssl_keyfile={missing}", "ssl_keyfile"),
])
def test_a_tls_file_that_does_not_exist_stops_the_process_at_start(
        tmp_path: Path, field: str, url: str, message: str) -> None:
    missing = tmp_path / "nowhere.pem"
    assert message.format(missing=missing) in refusal(**{field: url.format(missing=missing)})


@pytest.mark.parametrize(("field", "url", "message"), [
    ("rabbitmq_url", "amqp://u:p@mq:5672/herald?cafile={ca}",
     "HERALD_RABBITMQ_URL: cafile: TLS options, for amqps:// URLs only"),
    ("redis_url", "redis://redis:6379/0?ssl_ca_certs={ca}&ssl_cert_reqs=required",
     "HERALD_REDIS_URL: ssl_ca_certs, ssl_cert_reqs: TLS options, for rediss:// URLs only"),
])
def test_tls_options_on_a_plain_url_are_refused(ca: Path, field: str, url: str,
                                                message: str) -> None:
    assert message in refusal(**{field: url.format(ca=ca)})


def test_an_unknown_certificate_requirement_is_refused(ca: Path) -> None:
    assert "ssl_cert_reqs must be one of none, optional, required" in refusal(
        redis_url=f"rediss://redis:6380/0?ssl_ca_certs={ca}&ssl_cert_reqs=always")
