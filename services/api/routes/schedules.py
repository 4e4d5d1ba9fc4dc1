"""``/v1/schedules``: recurring campaigns from a template, a cron expression and a timezone."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from herald.contracts.http import ScheduleCreate, SchedulePage, SchedulePatch, ScheduleView
from herald.domain.access import Scope
from herald.domain.documents import Schedule
from herald.domain.types import OBJECT_ID_PATTERN
from services.api.auth import (
    Caller,
    require_frequency_cap,
    require_lane,
    require_purpose,
    require_quiet_hours,
    scoped,
)
from services.api.bodies import checked_later
from services.api.deps import (
    CheckBody,
    CreateSchedule,
    EndSchedule,
    FindSchedule,
    FrequencyCapRoles,
    ListSchedules,
    MisfireGrace,
    QuietHoursRoles,
    Replan,
    TransactionalRoles,
    UrgentRoles,
)
from services.api.errors import schedule_not_found
from services.api.operator_log import OperatorLoggedRoute, log_detail, logged
from services.api.views import schedule_view

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], route_class=OperatorLoggedRoute)
Reader = Annotated[Caller, scoped(Scope.SCHEDULES_READ)]
Writer = Annotated[Caller, scoped(Scope.SCHEDULES_WRITE)]

ScheduleId = Annotated[str, Path(pattern=OBJECT_ID_PATTERN.pattern,
                                 description="Schedule id: 24 lowercase hex digits")]


def _view(grace_s: float, schedule: Schedule) -> ScheduleView:
    return schedule_view(schedule, grace_s)


@router.post("", status_code=201, response_model=ScheduleView,
             openapi_extra=logged("schedule.create"))
async def create_schedule(raw: Annotated[dict[str, Any], checked_later(ScheduleCreate)],
                          check: CheckBody, create: CreateSchedule, grace_s: MisfireGrace,
                          request: Request, response: Response, caller: Writer,
                          urgent_roles: UrgentRoles,
                          transactional_roles: TransactionalRoles,
                          frequency_cap_roles: FrequencyCapRoles,
                          quiet_hours_roles: QuietHoursRoles) -> ScheduleView:
    body = await check(ScheduleCreate, raw)
    require_lane(caller, body.template.lane, urgent_roles)
    require_purpose(caller, body.template.purpose, transactional_roles)
    require_frequency_cap(caller, body.template.frequency_cap, frequency_cap_roles)
    require_quiet_hours(caller, body.template.quiet_hours, quiet_hours_roles)
    schedule = await create(body, caller.actor)
    log_detail(request, f"lane={body.template.lane.value} "
                        f"purpose={body.template.purpose.value}")
    response.headers["Location"] = f"/v1/schedules/{schedule.id}"
    return _view(grace_s, schedule)


@router.get("/{schedule_id}", response_model=ScheduleView)
async def get_schedule(schedule_id: ScheduleId, find: FindSchedule, grace_s: MisfireGrace,
                       _: Reader) -> ScheduleView:
    return _view(grace_s, await find(schedule_id))


@router.get("", response_model=SchedulePage)
async def list_schedules(
    list_page: ListSchedules, grace_s: MisfireGrace, _: Reader,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=OBJECT_ID_PATTERN.pattern)] = None,
) -> SchedulePage:
    page = await list_page(cursor, limit)
    return SchedulePage(items=[_view(grace_s, s) for s in page.items],
                        next_cursor=page.next_cursor)


@router.patch("/{schedule_id}", response_model=ScheduleView,
              openapi_extra=logged("schedule.edit"))
async def patch_schedule(schedule_id: ScheduleId,
                         raw: Annotated[dict[str, Any], checked_later(SchedulePatch)],
                         check: CheckBody, replan: Replan, grace_s: MisfireGrace, caller: Writer,
                         urgent_roles: UrgentRoles,
                         transactional_roles: TransactionalRoles,
                         frequency_cap_roles: FrequencyCapRoles,
                         quiet_hours_roles: QuietHoursRoles) -> ScheduleView:
    """Pause, resume or edit; the next run is recomputed from now when timing changes."""
    body = await check(SchedulePatch, raw)
    require_lane(caller, body.template.lane if body.template else None, urgent_roles)
    require_purpose(caller, body.template.purpose if body.template else None,
                    transactional_roles)
    require_frequency_cap(caller, body.template.frequency_cap if body.template else None,
                          frequency_cap_roles)
    require_quiet_hours(caller, body.template.quiet_hours if body.template else None,
                        quiet_hours_roles)
    changes = body.model_dump(exclude_unset=True, exclude_none=True, mode="json", by_alias=True)
    if body.template is not None:  # a new template names its purpose: never a legacy one
        changes["template"]["purpose"] = body.template.purpose.value
    updated = await replan(schedule_id, changes, caller.actor)
    if updated is None:
        raise schedule_not_found(schedule_id)
    return _view(grace_s, updated)


@router.delete("/{schedule_id}", response_model=ScheduleView,
               openapi_extra=logged("schedule.end"))
async def end_schedule(schedule_id: ScheduleId, end: EndSchedule, grace_s: MisfireGrace,
                       caller: Writer) -> ScheduleView:
    """End the schedule: no further runs; its past runs stay as they are."""
    ended = await end(schedule_id, caller.actor)
    if ended is None:
        raise schedule_not_found(schedule_id)
    return _view(grace_s, ended)
