"""``/v1/devices``: register devices one at a time, ten thousand at a time (upsert by token), or
a file of millions streamed as NDJSON; and unregister one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from herald.contracts.device_lines import MAX_LINE_BYTES, NDJSON_MEDIA_TYPE, device_lines
from herald.contracts.http import (
    DeviceBulkIn,
    DeviceBulkResult,
    DeviceImportResult,
    DeviceIn,
    DeviceUpserted,
    ErrorResponse,
    ImportProblem,
)
from herald.domain.access import Scope
from herald.domain.device_import import ImportReport
from herald.domain.types import MAX_TOKEN_CHARS, TOKEN_PATTERN
from services.api.auth import Caller, scoped
from services.api.deps import ImportDevices, RegisterDevices, UnregisterDevice
from services.api.errors import ApiError
from services.api.limits import device_import, streamed_import
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


@router.post("/import", response_model=DeviceImportResult, openapi_extra=streamed_import(
    NDJSON_MEDIA_TYPE, f"One device per line, each as an item of `POST /v1/devices/bulk`; a "
                       f"line is at most {MAX_LINE_BYTES:,} bytes"),
    responses={415: {"model": ErrorResponse,
                     "description": f"The body is not `{NDJSON_MEDIA_TYPE}`"}})
async def import_devices(request: Request, run_import: ImportDevices,
                         _: Ingest) -> DeviceImportResult:
    """Import a file of devices (upsert by token), read as it arrives: one device per line, as
    an item of ``/bulk``. Idempotent per token: importing the same file again writes nothing
    and counts every line ``unchanged``. An invalid line is counted, listed by number in
    ``problems`` (the first 1,000), and skipped; the other lines are imported."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != NDJSON_MEDIA_TYPE:
        raise ApiError(415, "unsupported_media_type",
                       f"send the devices as {NDJSON_MEDIA_TYPE} (one JSON object per line), "
                       f"not {media_type or 'a body without a Content-Type'}")
    return _result(await run_import(device_lines(request.stream())))


def _result(report: ImportReport) -> DeviceImportResult:
    counts = report.counts
    return DeviceImportResult(
        lines=counts.lines, inserted=counts.inserted, updated=counts.updated,
        unchanged=counts.unchanged, invalid=counts.invalid,
        problems=[ImportProblem(line=p.line, code=p.code, message=p.message)
                  for p in report.problems],
        problems_omitted=report.problems_omitted)


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
