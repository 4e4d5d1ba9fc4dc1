"""``/v1/devices``: register devices one at a time or ten thousand at a time (upsert by token)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from herald.clock import utcnow
from herald.domain.api import DeviceBulkIn, DeviceBulkResult, DeviceIn, DeviceUpserted
from services.api.deps import Services

router = APIRouter(prefix="/v1/devices", tags=["devices"])


@router.post("", status_code=201, response_model=DeviceUpserted,
             responses={200: {"model": DeviceUpserted, "description": "Known token, updated"}})
async def upsert_device(body: DeviceIn, services: Services, response: Response) -> DeviceUpserted:
    counts = await services.pod.stores.devices.upsert([body.model_dump(mode="json")], utcnow())
    if not counts.created:
        response.status_code = 200
    return DeviceUpserted(token=body.token, created=bool(counts.created))


@router.post("/bulk", response_model=DeviceBulkResult)
async def upsert_devices(body: DeviceBulkIn, services: Services) -> DeviceBulkResult:
    devices = [device.model_dump(mode="json") for device in body.devices]
    counts = await services.pod.stores.devices.upsert(devices, utcnow())
    return DeviceBulkResult(created=counts.created, updated=counts.updated)
