"""``/v1/devices``: register devices one at a time or ten thousand at a time (upsert by token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response

from herald.contracts.http import DeviceBulkIn, DeviceBulkResult, DeviceIn, DeviceUpserted
from herald.domain.access import Scope
from services.api.auth import Caller, scoped
from services.api.bodies import OffLoopRoute
from services.api.deps import RegisterDevices
from services.api.limits import device_import

router = APIRouter(prefix="/v1/devices", tags=["devices"], route_class=OffLoopRoute)
Ingest = Annotated[Caller, scoped(Scope.DEVICES_WRITE)]


@router.post("", status_code=201, response_model=DeviceUpserted,
             responses={200: {"model": DeviceUpserted, "description": "Known token, updated"}})
async def upsert_device(body: DeviceIn, register: RegisterDevices, response: Response,
                        _: Ingest) -> DeviceUpserted:
    counts = await register([body])
    if not counts.created:
        response.status_code = 200
    return DeviceUpserted(token=body.token, created=bool(counts.created))


@router.post("/bulk", response_model=DeviceBulkResult, openapi_extra=device_import())
async def upsert_devices(body: DeviceBulkIn, register: RegisterDevices,
                         _: Ingest) -> DeviceBulkResult:
    counts = await register(body.devices)
    return DeviceBulkResult(created=counts.created, updated=counts.updated)
