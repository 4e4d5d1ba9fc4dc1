"""The MongoDB repositories of one stack, built once per process from its database (composition:
the adapters behind the service layer's ``Stores``)."""

from __future__ import annotations

from herald.adapters.access import ApiKeyStore, OperatorLogStore
from herald.adapters.campaigns import CampaignStore
from herald.adapters.chunks import ChunkStore, DeliveryStore
from herald.adapters.devices import DeviceStore
from herald.adapters.idempotency import IdempotencyKeys
from herald.adapters.mongo import Database
from herald.adapters.schedules import ScheduleStore
from herald.adapters.test_sends import TestSendStore
from herald.service_layer.ports import Stores


def mongo_stores(db: Database) -> Stores:
    return Stores(devices=DeviceStore(db), campaigns=CampaignStore(db), chunks=ChunkStore(db),
                  deliveries=DeliveryStore(db), idempotency=IdempotencyKeys(db),
                  schedules=ScheduleStore(db), api_keys=ApiKeyStore(db),
                  operator_log=OperatorLogStore(db), test_sends=TestSendStore(db))
