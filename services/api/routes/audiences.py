"""``/v1/audiences``: how many devices an audience reaches, before a campaign is sent to it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from herald.contracts.http import AudienceEstimate, AudienceEstimateRequest
from herald.domain.access import Scope
from services.api.auth import Caller, scoped
from services.api.deps import AudienceSplit

router = APIRouter(prefix="/v1/audiences", tags=["campaigns"])


@router.post("/estimate", response_model=AudienceEstimate)
async def estimate_audience(body: AudienceEstimateRequest, audience_split: AudienceSplit,
                            _: Annotated[Caller, scoped(Scope.CAMPAIGNS_READ)]
                            ) -> AudienceEstimate:
    """How many devices the audience filter (the one of a campaign create) selects now, and,
    given the tags of a campaign's translations (``languages``), how they split by the variant
    each would get. A read: it changes nothing, so anyone who may read campaigns may ask."""
    devices, by_language = await audience_split(body.audience, body.languages)
    return AudienceEstimate(devices=devices, by_language=by_language)
