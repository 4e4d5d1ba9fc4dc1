"""``/v1/users``: a person leaves (their devices, and their place in every record)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from herald.contracts.http import UserErased
from herald.domain.access import Scope
from herald.domain.types import MAX_USER_ID_CHARS
from services.api.auth import Caller, scoped
from services.api.deps import EraseUser
from services.api.operator_log import OperatorLoggedRoute, log_detail, logged

router = APIRouter(prefix="/v1/users", tags=["devices"], route_class=OperatorLoggedRoute)
Ingest = Annotated[Caller, scoped(Scope.DEVICES_WRITE)]
UserIdPath = Annotated[str, Path(min_length=1, max_length=MAX_USER_ID_CHARS,
                                 description="The user id the app registered devices with")]


@router.delete("/{user_id}", response_model=UserErased, openapi_extra=logged("user.erase"))
async def erase_user(user_id: UserIdPath, erase: EraseUser, request: Request,
                     _: Ingest) -> UserErased:
    """Erase a person: their devices are removed and every campaign's records forget them
    (counts unchanged; the audit and follow-ups skip them). Idempotent: zeros when nothing
    was left. The operator log keeps the counts, never the user id."""
    erased = await erase(user_id)
    log_detail(request, erased.summary())
    return UserErased(devices=erased.devices, chunk_recipients=erased.recipients,
                      test_send_outcomes=erased.test_outcomes,
                      archives_pending=erased.archives_pending)
