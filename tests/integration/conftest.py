"""Integration fixtures: a real nx-27017 wire server, real RabbitMQ (a vhost per test), real Redis
(a key namespace per test), and the FCM emulator as a process. No mocks of any of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient

from devstack.processes import free_port
from devstack.stack import Stack, StackConfig
from fcm_emulator.client import EmulatorClient
from herald.adapters import mongo
from herald.adapters import redis as redis_adapter
from herald.adapters.mongo import Database, Document
from herald.adapters.stores import Stores
from herald.settings import Settings
from services.api.app import create_app
from tests.support import create_vhost, delete_vhost, unique_name

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


@pytest.fixture
def vhost() -> Iterator[str]:
    name = unique_name()
    url = create_vhost(name)
    yield url
    delete_vhost(name)


@pytest.fixture
def broker_settings(local_stack: Stack, database_name: str, vhost: str) -> Settings:
    """Settings with a private RabbitMQ vhost."""
    return _settings(local_stack, database_name, vhost)


def _settings(stack: Stack, database: str, rabbitmq_url: str) -> Settings:
    return Settings(
        mongodb_url=f"mongodb://127.0.0.1:{stack.config.mongodb_port}/{database}"
                    "?directConnection=true",
        rabbitmq_url=rabbitmq_url, redis_url="redis://127.0.0.1:6379/0",
        fcm_endpoint=stack.config.fcm_url, fcm_project_id="herald-test",
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
    return Stores.on(db)


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[redis_adapter.Redis]:
    client = redis_adapter.connect(settings)
    yield client
    keys = [k async for k in client.scan_iter(match=f"herald:{settings.mongodb_database}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def api(broker_settings: Settings, db: Database, redis: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The FastAPI app in this process, with its lifespan (a real pod behind it)."""
    app = create_app(broker_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://herald") as client:
            yield client
