"""The connections a process owns: built by its composition root, opened at startup, closed at
shutdown (arq's ``on_startup``/``on_shutdown``). Nothing connects at import time, and no client is
ever module-level: every handler gets the clients it uses passed in."""

from __future__ import annotations

from dataclasses import dataclass

from faststream.rabbit import RabbitBroker
from pymongo import AsyncMongoClient

from herald.adapters import mongo, rabbit
from herald.adapters import redis as redis_adapter
from herald.adapters.mongo import Database, Document
from herald.adapters.redis import Redis, RedisCancelFlags, RedisPodRegistry
from herald.names import RedisKeys
from herald.runtime.stores import mongo_stores
from herald.service_layer.ports import Stores
from herald.settings import Settings, warn_about_insecure_tls


@dataclass(frozen=True)
class Resources:
    mongo_client: AsyncMongoClient[Document]
    db: Database
    stores: Stores
    redis: Redis
    keys: RedisKeys
    flags: RedisCancelFlags
    registry: RedisPodRegistry
    broker: RabbitBroker
    bus: rabbit.RabbitBus

    @classmethod
    def build(cls, service: str, settings: Settings) -> Resources:
        """Every client, configured from ``settings``; they connect on first use."""
        warn_about_insecure_tls(settings)
        client = mongo.connect(settings, app_name=f"herald-{service}")
        db = mongo.database(client, settings)
        redis = redis_adapter.connect(settings)
        keys = RedisKeys(settings.mongodb_database)
        broker = rabbit.make_broker(settings, graceful_timeout_s=settings.grace_period_s)
        return cls(mongo_client=client, db=db, stores=mongo_stores(db), redis=redis, keys=keys,
                   flags=RedisCancelFlags(redis, keys, settings.cancel_flag_ttl_s),
                   registry=RedisPodRegistry(redis, keys, settings.heartbeat_ttl_s),
                   broker=broker, bus=rabbit.RabbitBus(broker))

    async def startup(self) -> None:
        """Indexes, then the broker: consumers first (each declares its queue on its own
        channel), then the rest of the topology. Register consumers before calling this."""
        await mongo.ensure_indexes(self.db)
        await self.broker.connect()
        await self.broker.start()
        await rabbit.declare_topology(self.broker)

    async def stop_consuming(self) -> None:
        """Stop every consumer, waiting for the handlers in flight (the grace period)."""
        await self.broker.stop()

    async def shutdown(self) -> None:
        await self.redis.aclose()
        await self.mongo_client.close()
