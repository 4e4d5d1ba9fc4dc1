"""``/v1/campaigns``: create, read, list, audit, cancel and retarget campaigns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from bson import ObjectId
from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from herald.domain.api import (
    CampaignCreate,
    CampaignCreated,
    CampaignPage,
    CampaignPatch,
    CampaignView,
    CancelRequest,
    CancelResult,
    RetargetRequest,
)
from herald.domain.status import Status
from herald.domain.types import OBJECT_ID_PATTERN
from herald.service_layer.campaigns import edit_scheduled
from herald.service_layer.cancellation import CancelDecision
from herald.service_layer.recipients import OUTCOMES, audit
from services.api.deps import Services
from services.api.errors import not_found
from services.api.views import campaign_view

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"])

CampaignId = Annotated[str, Path(pattern=OBJECT_ID_PATTERN.pattern,
                                 description="Campaign id: 24 lowercase hex digits")]
AUDIT_LINES_PER_WRITE = 500


@router.post("", status_code=202, response_model=CampaignCreated)
async def create_campaign(
    body: CampaignCreate, services: Services, response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> CampaignCreated:
    result = await services.creator.create(body, idempotency_key)
    if not result.created:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/campaigns/{result.campaign['_id']}"
    return CampaignCreated(id=str(result.campaign["_id"]), status=result.campaign["status"])


@router.get("/{campaign_id}", response_model=CampaignView)
async def get_campaign(campaign_id: CampaignId, services: Services) -> CampaignView:
    campaign = await services.pod.stores.campaigns.get(campaign_id)
    if campaign is None:
        raise not_found(campaign_id)
    return campaign_view(campaign)


@router.get("", response_model=CampaignPage)
async def list_campaigns(
    services: Services,
    status: Annotated[list[Status] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=OBJECT_ID_PATTERN.pattern,
                                        description="next_cursor of the previous page")] = None,
) -> CampaignPage:
    before = ObjectId(cursor) if cursor else None
    page = await services.pod.stores.campaigns.page(status, before, limit + 1)
    items = [campaign_view(c) for c in page[:limit]]
    next_cursor = items[-1].id if len(page) > limit else None
    return CampaignPage(items=items, next_cursor=next_cursor)


@router.get("/{campaign_id}/recipients", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}},
                             "description": "One JSON object per line: token, user_id, outcome, error"}})
async def list_recipients(
    campaign_id: CampaignId, services: Services,
    outcome: Annotated[str, Query(pattern=f"^({'|'.join(OUTCOMES)})$")],
) -> StreamingResponse:
    campaign = await services.pod.stores.campaigns.get(campaign_id)
    if campaign is None:
        raise not_found(campaign_id)
    return StreamingResponse(_ndjson(audit(services.pod.stores, campaign, outcome)),
                             media_type="application/x-ndjson")


async def _ndjson(lines: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    block: list[bytes] = []
    async for line in lines:
        block.append(orjson.dumps(line.as_dict()))
        if len(block) >= AUDIT_LINES_PER_WRITE:
            yield b"\n".join(block) + b"\n"
            block = []
    if block:
        yield b"\n".join(block) + b"\n"


@router.post("/{campaign_id}/cancel", response_model=CancelResult,
             responses={202: {"model": CancelResult, "description": "Pods are stopping"}})
async def cancel_campaign(
    campaign_id: CampaignId, services: Services, request: Request, response: Response,
    body: CancelRequest | None = None,
    x_requested_by: Annotated[str | None, Header(max_length=200)] = None,
) -> CancelResult:
    requested_by = x_requested_by or (f"ip:{request.client.host}" if request.client else None)
    outcome = await services.pod.cancellation.request(
        campaign_id, body.reason if body else None, requested_by, broadcast=True)
    if outcome.decision is CancelDecision.STOP_PODS:
        services.finalize_cancel_soon(campaign_id)
    response.status_code = 200 if outcome.status is Status.CANCELLED else 202
    view = campaign_view(outcome.campaign)
    return CancelResult(id=view.id, status=view.status, counts=view.counts, cancel=view.cancel)


@router.patch("/{campaign_id}", response_model=CampaignView)
async def patch_campaign(campaign_id: CampaignId, body: CampaignPatch,
                         services: Services) -> CampaignView:
    """Change the time or content of a campaign that is still ``scheduled`` (else 409)."""
    updated = await edit_scheduled(services.pod.stores, campaign_id, body)
    if updated is None:
        raise not_found(campaign_id)
    return campaign_view(updated)


@router.post("/{campaign_id}/retry", status_code=202, response_model=CampaignCreated)
async def retry_campaign(campaign_id: CampaignId, services: Services,
                         response: Response) -> CampaignCreated:
    """Re-run a ``failed`` campaign for the recipients it did not reach (not dead tokens)."""
    created = await services.creator.retry(campaign_id)
    if created is None:
        raise not_found(campaign_id)
    response.headers["Location"] = f"/v1/campaigns/{created['_id']}"
    return CampaignCreated(id=str(created["_id"]), status=created["status"])


@router.post("/{campaign_id}/retarget", status_code=202, response_model=CampaignCreated)
async def retarget_campaign(campaign_id: CampaignId, services: Services, response: Response,
                            body: RetargetRequest | None = None) -> CampaignCreated:
    created = await services.creator.retarget(campaign_id, body or RetargetRequest())
    if created is None:
        raise not_found(campaign_id)
    response.headers["Location"] = f"/v1/campaigns/{created['_id']}"
    return CampaignCreated(id=str(created["_id"]), status=created["status"])
