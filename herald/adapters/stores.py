"""All MongoDB stores of one stack, built once per process from its database."""

from __future__ import annotations

from dataclasses import dataclass

from herald.adapters.campaigns import CampaignStore
from herald.adapters.chunks import ChunkStore, DeliveryStore
from herald.adapters.devices import DeviceStore
from herald.adapters.idempotency import IdempotencyKeys
from herald.adapters.mongo import Database
from herald.adapters.schedules import ScheduleStore


@dataclass(frozen=True)
class Stores:
    devices: DeviceStore
    campaigns: CampaignStore
    chunks: ChunkStore
    deliveries: DeliveryStore
    idempotency: IdempotencyKeys
    schedules: ScheduleStore

    @classmethod
    def on(cls, db: Database) -> Stores:
        return cls(devices=DeviceStore(db), campaigns=CampaignStore(db), chunks=ChunkStore(db),
                   deliveries=DeliveryStore(db), idempotency=IdempotencyKeys(db),
                   schedules=ScheduleStore(db))
