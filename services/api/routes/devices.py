"""``/v1/devices``: register devices one at a time or ten thousand at a time (upsert by token),
and unregister one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from herald.contracts.http import DeviceBulkIn, DeviceBulkResult, DeviceIn, DeviceUpserted
from herald.domain.access import Scope
from herald.domain.types import MAX_TOKEN_CHARS, TOKEN_PATTERN
from services.api.auth import Caller, scoped
from services.api.deps import RegisterDevices, UnregisterDevice
from services.api.limits import device_import
from services.api.operator_log import OperatorLoggedRoute, log_detail, logged

router = APIRouter(prefix="/v1/devices", tags=["devices"], route_class=OperatorLoggedRoute)
Ingest = Annotated[Caller, scoped(Scope.DEVICES_WRITE)]
DeviceToken = Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS, pattern=TOKEN_PATTERN,
                                  description="The device's token, as registered")]


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


@router.delete("/{token}", status_code=204, response_class=Response,
               openapi_extra=logged("device.delete"))
async def unregister_device(token: DeviceToken, unregister: UnregisterDevice, request: Request,
                            _: Ingest) -> Response:
    """Remove the device: no audience selects it again. 204 whether or not it was registered
    (a retried delete is not an error); the operator log says which (``devices=1`` or ``0``),
    never the token."""
    removed = await unregister(token)
    log_detail(request, f"devices={int(removed)}")
    return Response(status_code=204)
