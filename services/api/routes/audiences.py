"""``/v1/audiences``: how many devices an audience reaches, and when a campaign to it would be
done, before it is sent."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from herald.contracts.http import AudienceEstimate, AudienceEstimateRequest
from herald.domain.access import Scope
from herald.service_layer.campaigns import rollout_of
from services.api.auth import Caller, scoped
from services.api.bodies import OffLoopRoute
from services.api.deps import AudienceSplit, Forecasts
from services.api.views import forecast_fields

router = APIRouter(prefix="/v1/audiences", tags=["campaigns"], route_class=OffLoopRoute)


@router.post("/estimate", response_model=AudienceEstimate)
async def estimate_audience(body: AudienceEstimateRequest, audience_split: AudienceSplit,
                            forecasts: Forecasts,
                            _: Annotated[Caller, scoped(Scope.CAMPAIGNS_READ)]
                            ) -> AudienceEstimate:
    """How many devices the audience filter (the one of a campaign create) selects now;
    given the tags of a campaign's translations (``languages``), how they split by the variant
    each would get; and, given its ``rate_per_s``, ``lane`` and ``rollout``, when a campaign
    created now would reach its last recipient (``finishes_in_s``). A read: it changes nothing,
    so anyone who may read campaigns may ask."""
    devices, by_language = await audience_split(body.audience, body.languages)
    forecast = await forecasts.new_campaign(devices, body.lane, body.rate_per_s,
                                            rollout_of(body.rollout))
    return AudienceEstimate(devices=devices, by_language=by_language,
                            finishes_in_s=forecast.finishes_in_s, **forecast_fields(forecast))
