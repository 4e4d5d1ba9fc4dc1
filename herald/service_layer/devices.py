"""Registering devices: one at a time from the app backend, or ten thousand at a time."""

from __future__ import annotations

from collections.abc import Sequence

from herald.clock import utcnow
from herald.contracts.http import DeviceIn
from herald.domain.documents import UpsertCounts
from herald.service_layer.ports import DeviceRepository


async def register_devices(devices: DeviceRepository, batch: Sequence[DeviceIn]) -> UpsertCounts:
    """Insert new tokens and update known ones (the last entry wins for a repeated token)."""
    return await devices.upsert(batch, utcnow())
