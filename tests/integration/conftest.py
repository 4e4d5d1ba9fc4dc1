"""Integration fixtures: a real nx-27017 wire server, real RabbitMQ (a vhost per test), real Redis
(a key namespace per test), and the FCM emulator as a process. No mocks of any of them."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from faststream.rabbit import RabbitBroker
from pydantic import SecretStr
from pymongo import AsyncMongoClient

from devstack.broker_users import BrokerUsers, delete_users, import_definitions, user_definitions
from devstack.isolation import VhostPool, guest_url
from devstack.processes import free_port
from devstack.stack import Stack, StackConfig
from fcm_emulator.client import EmulatorClient
from herald.adapters import mongo, rabbit
from herald.adapters import redis as redis_adapter
from herald.adapters.mongo import Database, Document
from herald.domain.access import new_token
from herald.names import RedisKeys
from herald.runtime.stores import mongo_stores
from herald.service_layer.ports import Stores
from herald.settings import Settings
from services.api.app import create_app
from tests.integration.helpers import client_of, vhost_name
from tests.support import unique_name

UNUSED_VHOST_URL = "amqp://guest:guest@127.0.0.1:5672/herald_tests_without_broker"
"""Settings of tests that must not touch RabbitMQ point at a vhost that does not exist."""


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """nx-27017 and the FCM emulator on free ports, for the whole session."""
    run_dir: Path = tmp_path_factory.mktemp("integration-stack")
    stack = Stack(StackConfig(run_dir=run_dir, mongodb_port=free_port(), fcm_port=free_port()))
    stack.start_mongodb()
    stack.start_emulator()
    yield stack
    stack.stop(timeout_s=10)


@pytest.fixture
def emulator(local_stack: Stack) -> Iterator[EmulatorClient]:
    client = EmulatorClient(local_stack.config.fcm_url)
    client.reset()
    yield client
    client.reset()
    client.close()


@pytest.fixture
def database_name() -> str:
    return unique_name()


@pytest.fixture
def settings(local_stack: Stack, database_name: str) -> Settings:
    """Settings of a test that needs MongoDB, Redis and the emulator but no broker."""
    return _settings(local_stack, database_name, UNUSED_VHOST_URL)


@pytest.fixture(scope="session")
def broker_users() -> Iterator[BrokerUsers]:
    """The service and cancel users of this session (users are global to the broker: made once,
    given Herald's permissions in each test's vhost)."""
    users = BrokerUsers.new(unique_name("herald_it"))
    import_definitions(user_definitions(users))
    yield users
    delete_users(users)


@pytest.fixture(scope="session")
def vhost_pool(broker_users: BrokerUsers) -> Iterator[VhostPool]:
    pool = VhostPool(broker_users, prefix="herald_it")
    yield pool
    pool.close()


@pytest.fixture
def vhost(vhost_pool: VhostPool) -> Iterator[str]:
    """A private vhost (from the session's pool, emptied between tests); the URL of guest on it
    (every permission), for the test's own tools."""
    name = vhost_pool.acquire()
    yield guest_url(name)
    vhost_pool.release(name)


@pytest.fixture
def broker_settings(local_stack: Stack, database_name: str, vhost: str,
                    broker_users: BrokerUsers) -> Settings:
    """Settings with a private RabbitMQ vhost, where the pod connects as the service user."""
    return _settings(local_stack, database_name, broker_users.service.url(vhost_name(vhost)))


def _settings(stack: Stack, database: str, rabbitmq_url: str) -> Settings:
    return Settings(
        mongodb_url=f"mongodb://127.0.0.1:{stack.config.mongodb_port}/{database}"
                    "?directConnection=true",
        rabbitmq_url=rabbitmq_url, redis_url="redis://127.0.0.1:6379/0",
        fcm_endpoint=stack.config.fcm_url, fcm_project_id="herald-test",
        fcm_credentials=stack.config.service_account(),  # the emulator checks OAuth tokens
        heartbeat_interval_s=0.5, sweep_interval_s=0.2, grace_period_s=5.0)


@pytest.fixture
async def mongo_client(settings: Settings) -> AsyncIterator[AsyncMongoClient[Document]]:
    client = mongo.connect(settings, app_name="herald-tests")
    yield client
    await client.drop_database(settings.mongodb_database)
    await client.close()


@pytest.fixture
async def db(mongo_client: AsyncMongoClient[Document], settings: Settings) -> Database:
    database = mongo.database(mongo_client, settings)
    await mongo.ensure_indexes(database)
    return database


@pytest.fixture
def stores(db: Database) -> Stores:
    return mongo_stores(db)


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[redis_adapter.Redis]:
    client = redis_adapter.connect(settings)
    yield client
    keys = [k async for k in client.scan_iter(match=RedisKeys(settings.mongodb_database).everything())]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def admin_key() -> str:
    """The api's bootstrap admin key for this test (unique: keys of runs never meet)."""
    return new_token("bootstrap")


@pytest.fixture
async def api_app(broker_settings: Settings, db: Database, redis: Any,
                  admin_key: str) -> AsyncIterator[FastAPI]:
    """The FastAPI app in this process, with its lifespan (a real pod behind it)."""
    app = create_app(broker_settings.model_copy(
        update={"bootstrap_api_key": SecretStr(admin_key)}))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def api(api_app: FastAPI, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the in-process api, calling as its admin key."""
    async with client_of(api_app, admin_key) as client:
        yield client


@pytest.fixture
def silent_broker() -> Iterator[int]:
    """A TCP port that accepts connections and never answers; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


@pytest.fixture
async def broker(broker_settings: Settings) -> AsyncIterator[RabbitBroker]:
    """A connected broker client with Herald's topology declared, in the test's vhost."""
    connected = rabbit.make_broker(broker_settings)
    await connected.connect()
    await rabbit.declare_topology(connected)
    yield connected
    await connected.stop()
