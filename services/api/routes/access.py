"""``/v1/api-keys`` (admin), ``/v1/operator-log`` and ``/v1/me``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from herald.contracts.http import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyPage,
    ApiKeyView,
    Me,
    OperatorLogPage,
)
from herald.domain.access import ROLE_SCOPES, Scope, allows
from services.api.auth import Caller, RequireKey, lanes_of, purposes_of, scoped
from services.api.deps import (
    ApiKeys,
    FrequencyCapRoles,
    MintKey,
    OperatorLogEntries,
    QuietHoursRoles,
    RevokeKey,
    TransactionalRoles,
    UrgentRoles,
)
from services.api.operator_log import OperatorLoggedRoute, log_detail, logged
from services.api.views import api_key_view, log_entry_view

router = APIRouter(prefix="/v1", tags=["access"], route_class=OperatorLoggedRoute)

KeyId = Annotated[str, Path(pattern=r"^[0-9a-z]{1,32}$", description="The key's id")]


@router.post("/api-keys", status_code=201, response_model=ApiKeyCreated,
             openapi_extra=logged("key.create"))
async def create_key(body: ApiKeyCreate, mint: MintKey, request: Request, response: Response,
                     caller: Annotated[Caller, scoped(Scope.KEYS_MANAGE)]) -> ApiKeyCreated:
    """Mint a key for ``owner`` (the person it belongs to; omitted: the calling key's owner);
    its secret is in this answer and nowhere else, ever."""
    minted = await mint(body.name, body.role, body.expires_at, caller.actor, body.owner)
    log_detail(request, f"owner={minted.key.person} role={minted.key.role.value}")
    response.headers["Location"] = f"/v1/api-keys/{minted.key.id}"
    return ApiKeyCreated(**api_key_view(minted.key).model_dump(), secret=minted.token)


@router.get("/api-keys", response_model=ApiKeyPage)
async def list_keys(api_keys: ApiKeys, _: Annotated[Caller, scoped(Scope.KEYS_MANAGE)],
                    limit: Annotated[int, Query(ge=1, le=200)] = 100,
                    cursor: Annotated[str | None, Query(pattern=r"^[0-9a-z]{1,32}$")] = None,
                    ) -> ApiKeyPage:
    """Keys with their owner, role, creation, last use and expiry; never a secret."""
    found = await api_keys.page(cursor, limit + 1)
    items = [api_key_view(key) for key in found[:limit]]
    return ApiKeyPage(items=items, next_cursor=items[-1].id if len(found) > limit else None)


@router.delete("/api-keys/{key_id}", response_model=ApiKeyView,
               openapi_extra=logged("key.revoke"))
async def revoke(key_id: KeyId, revoke_key: RevokeKey,
                 caller: Annotated[Caller, scoped(Scope.KEYS_MANAGE)]) -> ApiKeyView:
    """Revoke a key: every api replica refuses it within a second."""
    return api_key_view(await revoke_key(key_id, caller.actor))


@router.get("/operator-log", response_model=OperatorLogPage)
async def operator_log(
    entries: OperatorLogEntries, _: Annotated[Caller, scoped(Scope.OPERATOR_LOG_READ)],
    campaign_id: Annotated[str | None, Query(pattern=r"^[0-9a-f]{24}$")] = None,
    actor: Annotated[str | None, Query(max_length=200, description="An actor's id")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9a-f]{24}$")] = None,
) -> OperatorLogPage:
    """Who did what, when, to what, from where, and how it ended; newest first."""
    found = await entries.page(campaign_id=campaign_id, actor_id=actor, before=cursor,
                               limit=limit + 1)
    items = [log_entry_view(entry) for entry in found[:limit]]
    return OperatorLogPage(items=items, next_cursor=items[-1].id if len(found) > limit else None)


@router.get("/me", response_model=Me)
async def me(caller: Annotated[Caller, RequireKey()], urgent_roles: UrgentRoles,
             transactional_roles: TransactionalRoles,
             frequency_cap_roles: FrequencyCapRoles, quiet_hours_roles: QuietHoursRoles) -> Me:
    """The calling key: its name, role, scopes and the lanes it may send in (what the console
    shows and hides)."""
    key = caller.key
    return Me(id=key.id, name=key.name, role=key.role, owner=key.person,
              scopes=sorted(scope.value for scope in ROLE_SCOPES[key.role]),
              expires_at=key.expires_at, lanes=lanes_of(key.role, urgent_roles),
              purposes=purposes_of(key.role, transactional_roles),
              frequency_cap=allows(key.role, Scope.CAMPAIGNS_SEND)
              and key.role.value in frequency_cap_roles,
              quiet_hours=allows(key.role, Scope.CAMPAIGNS_SEND)
              and key.role.value in quiet_hours_roles)
