"""TLS to the stores (issue 10), with a throwaway certificate authority made here with ``openssl``.

- Redis: a real ``redis-server`` listening on TLS only (``--port 0 --tls-port``), requiring client
  certificates. Herald's own client (``herald.adapters.redis.connect``) sets and reads a cancel
  flag through it; a client without the CA, or without a client certificate, is refused.
- MongoDB and RabbitMQ: the servers here speak no TLS, so each gets a TLS terminator in front
  (this module's ``TlsTerminator``: TLS on a free port, plain bytes to the real server). A whole pod
  then runs on ``mongodb://...?tls=true&tlsCAFile=``, ``amqps://...?cafile=`` and ``rediss://``,
  and a cancel published over TLS takes effect; clients without the CA are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import aio_pika
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from devstack.broker_users import BrokerUsers
from devstack.processes import free_port, port_open, wait_until
from devstack.stack import Stack
from herald import names
from herald.adapters import redis as redis_adapter
from herald.adapters.redis import RedisCancelFlags
from herald.domain.status import Status
from herald.names import RedisKeys
from herald.runtime.worker import running_pod
from herald.settings import Settings
from tests.factories import campaign
from tests.integration.helpers import vhost_name
from tests.support import eventually, unique_name

CERT_DAYS = "2"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _issue(name: str, usage: str, cwd: Path) -> tuple[Path, Path]:
    """A key and a certificate for 127.0.0.1/localhost, signed by the CA in ``cwd``."""
    (cwd / f"{name}.ext").write_text(
        "subjectAltName = DNS:localhost, IP:127.0.0.1\n"
        f"extendedKeyUsage = {usage}\nauthorityKeyIdentifier = keyid,issuer\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", CERT_DAYS, "-extfile", f"{name}.ext",
             "-out", f"{name}.pem", cwd=cwd)
    return cwd / f"{name}.pem", cwd / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A certificate authority of this test run alone, a server and a client certificate."""
    cwd = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", CERT_DAYS,
             "-subj", "/CN=herald-test-ca", cwd=cwd)
    server = _issue("server", "serverAuth", cwd)
    client = _issue("client", "clientAuth", cwd)
    return Pki(cwd / "ca.pem", *server, *client)


@pytest.fixture(scope="module")
def tls_redis_port(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server that listens on TLS only and requires a client certificate."""
    port, workdir = free_port(), tmp_path_factory.mktemp("redis-tls")
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
         "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "yes",
         "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open(port), 10, "redis-server on its TLS port")
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def rediss_url(port: int, **options: Path | str) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"rediss://127.0.0.1:{port}/0" + (f"?{query}" if query else "")


class TlsTerminator:
    """TLS on a free port of 127.0.0.1, every connection forwarded as plain bytes to
    ``upstream_port``: what a TLS-terminating server does, for servers that speak no TLS here."""

    def __init__(self, pki: Pki, upstream_port: int) -> None:
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(pki.server_cert, pki.server_key)
        self._upstream_port = upstream_port
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> TlsTerminator:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            writer.close()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                end.close()
                self._writers.discard(end)

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        with contextlib.suppress(ConnectionError, ssl.SSLError, RuntimeError):
            sink.close()


def _over_tls(url: str, scheme: str, port: int, query: str) -> str:
    """``url`` with another scheme, the terminator's port on 127.0.0.1, and ``query``."""
    parts = urlsplit(url)
    credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit((scheme, f"{credentials}127.0.0.1:{port}", parts.path, query, ""))


# --- Redis ---------------------------------------------------------------------------------------

async def test_herald_s_redis_client_sets_and_reads_a_cancel_flag_over_tls(
        pki: Pki, tls_redis_port: int) -> None:
    settings = Settings(fcm_endpoint="http://127.0.0.1:1", redis_url=rediss_url(
        tls_redis_port, ssl_ca_certs=pki.ca, ssl_certfile=pki.client_cert,
        ssl_keyfile=pki.client_key, ssl_cert_reqs="required"))
    keys = RedisKeys(unique_name())
    client = redis_adapter.connect(settings)
    try:
        flags = RedisCancelFlags(client, keys, ttl_s=60)
        await flags.raise_flag("6b0137d0eaff6ead39685496")
        assert await flags.is_raised("6b0137d0eaff6ead39685496")
        assert not await flags.is_raised("6b0137d0eaff6ead39685497")
        assert 0 < await client.ttl(keys.cancel_flag("6b0137d0eaff6ead39685496")) <= 60
        assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    finally:
        await client.aclose()


@pytest.mark.parametrize("options", [
    pytest.param({"ssl_certfile": "client_cert", "ssl_keyfile": "client_key"},
                 id="without-the-ca: the server's certificate is not trusted"),
    pytest.param({"ssl_ca_certs": "ca"},
                 id="without-a-client-certificate: the server refuses the client"),
])
async def test_a_redis_client_without_the_ca_or_its_certificate_is_refused(
        pki: Pki, tls_redis_port: int, options: dict[str, str]) -> None:
    files = {key: getattr(pki, name) for key, name in options.items()}
    client = aioredis.Redis.from_url(rediss_url(tls_redis_port, **files),
                                     socket_connect_timeout=5, socket_timeout=5)
    try:
        with pytest.raises(RedisConnectionError) as refused:
            await client.ping()
    finally:
        await client.aclose()
    if "ssl_ca_certs" not in options:
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


# --- MongoDB and RabbitMQ, through a TLS terminator; a whole pod on TLS ------------------------

@pytest.fixture
async def mongodb_over_tls(pki: Pki, local_stack: Stack) -> AsyncIterator[TlsTerminator]:
    async with TlsTerminator(pki, local_stack.config.mongodb_port) as terminator:
        yield terminator


@pytest.fixture
async def rabbitmq_over_tls(pki: Pki) -> AsyncIterator[TlsTerminator]:
    async with TlsTerminator(pki, 5672) as terminator:
        yield terminator


@pytest.fixture
def tls_settings(broker_settings: Settings, pki: Pki, tls_redis_port: int,
                 mongodb_over_tls: TlsTerminator, rabbitmq_over_tls: TlsTerminator) -> Settings:
    """The test's settings with every store reached over TLS, trusting the test's CA only."""
    ca = quote(str(pki.ca))
    return Settings(
        mongodb_url=_over_tls(broker_settings.mongodb_url, "mongodb", mongodb_over_tls.port,
                              f"directConnection=true&tls=true&tlsCAFile={ca}"),
        rabbitmq_url=_over_tls(broker_settings.rabbitmq_url, "amqps", rabbitmq_over_tls.port,
                               f"cafile={ca}"),
        redis_url=rediss_url(tls_redis_port, ssl_ca_certs=ca, ssl_certfile=pki.client_cert,
                             ssl_keyfile=pki.client_key),
        fcm_endpoint=broker_settings.fcm_endpoint, heartbeat_interval_s=0.5,
        grace_period_s=5.0)


async def test_a_pod_runs_on_tls_to_all_three_stores_and_applies_a_cancel_sent_over_tls(
        tls_settings: Settings, db: Any, broker_users: BrokerUsers, pki: Pki,
        rabbitmq_over_tls: TlsTerminator) -> None:
    assert tls_settings.mongodb_database == db.name  # the plain fixture drops it afterwards
    async with running_pod("api", tls_settings, acknowledges_cancels=False) as (pod, _):
        document = campaign(status=Status.IN_PROGRESS)
        await pod.resources.stores.campaigns.insert(document)
        cancel_url = _over_tls(
            broker_users.cancel.url(vhost_name(tls_settings.rabbitmq_url)), "amqps",
            rabbitmq_over_tls.port, f"cafile={quote(str(pki.ca))}")
        async with await aio_pika.connect(cancel_url) as connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(names.CANCEL_EXCHANGE, ensure=False)
            await exchange.publish(aio_pika.Message(
                b'{"campaign_id": "%s"}' % document.id.encode(),
                user_id=broker_users.cancel.name), routing_key="")

        async def cancelled() -> bool:
            stored = await pod.resources.stores.campaigns.get(document.id)
            return stored is not None and stored.status is Status.CANCELLED

        await eventually(cancelled, what="the cancel applied over TLS")
        assert await pod.resources.flags.is_raised(document.id)  # in the TLS-only Redis


_CONNECT_WITHOUT_THE_CA = """
import asyncio, sys, aio_pika
try:
    asyncio.run(aio_pika.connect(sys.argv[1], timeout=5))
except Exception as error:
    sys.exit(f"{type(error).__module__}.{type(error).__name__}: {error}")
"""


async def test_an_amqps_client_without_the_ca_is_refused(tls_settings: Settings) -> None:
    """In a process of its own (the TLS terminator keeps serving on this loop): after a failed
    handshake aiormq leaves a ``Connection.close`` coroutine that is only collected seconds
    later, in whichever test runs then."""
    untrusting = tls_settings.rabbitmq_url.split("?")[0]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CONNECT_WITHOUT_THE_CA, untrusting, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert b"aiormq.exceptions.AMQPConnectionError" in stderr
    assert b"CERTIFICATE_VERIFY_FAILED" in stderr
