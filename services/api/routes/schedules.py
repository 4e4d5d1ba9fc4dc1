"""``/v1/schedules``: recurring campaigns from a template, a cron expression and a timezone."""

from __future__ import annotations

from typing import Annotated

from bson import ObjectId
from fastapi import APIRouter, Path, Query, Response

from herald.clock import utcnow
from herald.domain.api import ScheduleCreate, SchedulePage, SchedulePatch, ScheduleView
from herald.domain.types import OBJECT_ID_PATTERN
from herald.service_layer.scheduling import new_schedule_document, replan
from services.api.deps import Services
from services.api.errors import schedule_not_found
from services.api.views import schedule_view

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

ScheduleId = Annotated[str, Path(pattern=OBJECT_ID_PATTERN.pattern,
                                 description="Schedule id: 24 lowercase hex digits")]


def _view(services: Services, schedule: dict[str, object]) -> ScheduleView:
    return schedule_view(schedule, services.pod.settings.misfire_grace_s)


@router.post("", status_code=201, response_model=ScheduleView)
async def create_schedule(body: ScheduleCreate, services: Services,
                          response: Response) -> ScheduleView:
    document = new_schedule_document(
        name=body.name, template=body.template.model_dump(mode="json", by_alias=True),
        cron=body.cron, timezone=body.timezone, misfire_grace_s=body.misfire_grace_s,
        now=utcnow())
    await services.pod.stores.schedules.insert(document)
    response.headers["Location"] = f"/v1/schedules/{document['_id']}"
    return _view(services, document)


@router.get("/{schedule_id}", response_model=ScheduleView)
async def get_schedule(schedule_id: ScheduleId, services: Services) -> ScheduleView:
    schedule = await services.pod.stores.schedules.get(schedule_id)
    if schedule is None:
        raise schedule_not_found(schedule_id)
    return _view(services, schedule)


@router.get("", response_model=SchedulePage)
async def list_schedules(
    services: Services, limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=OBJECT_ID_PATTERN.pattern)] = None,
) -> SchedulePage:
    page = await services.pod.stores.schedules.page(ObjectId(cursor) if cursor else None, limit + 1)
    items = [_view(services, s) for s in page[:limit]]
    return SchedulePage(items=items, next_cursor=items[-1].id if len(page) > limit else None)


@router.patch("/{schedule_id}", response_model=ScheduleView)
async def patch_schedule(schedule_id: ScheduleId, body: SchedulePatch,
                         services: Services) -> ScheduleView:
    """Pause, resume or edit; the next run is recomputed from now when timing changes."""
    changes = body.model_dump(exclude_unset=True, exclude_none=True, mode="json", by_alias=True)
    updated = await replan(services.pod.stores, schedule_id, changes)
    if updated is None:
        raise schedule_not_found(schedule_id)
    return _view(services, updated)


@router.delete("/{schedule_id}", response_model=ScheduleView)
async def end_schedule(schedule_id: ScheduleId, services: Services) -> ScheduleView:
    """End the schedule: no further runs; its past runs stay as they are."""
    ended = await services.pod.stores.schedules.update(
        schedule_id, {"state": "ended", "next_run_at": None, "updated_at": utcnow()})
    if ended is None:
        raise schedule_not_found(schedule_id)
    return _view(services, ended)
