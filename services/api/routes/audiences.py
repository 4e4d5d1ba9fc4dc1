"""``/v1/audiences``: how many devices an audience reaches, and when a campaign to it would be
done, before it is sent."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter

from herald.contracts.http import AudienceEstimate, AudienceEstimateRequest
from herald.domain.access import Scope, allows, roles_allowed
from herald.domain.purpose import reach
from herald.service_layer.campaigns import quiet_hours_of, rollout_of
from herald.service_layer.forecasting import Forecast
from herald.service_layer.holding_back import Asked
from services.api.auth import Caller, devices_read_adds, scoped
from services.api.bodies import OffLoopRoute
from services.api.deps import AudienceSplit, Forecasts, HeldBack
from services.api.errors import ApiError
from services.api.views import forecast_fields

router = APIRouter(prefix="/v1/audiences", tags=["campaigns"], route_class=OffLoopRoute)


@router.post("/estimate", response_model=AudienceEstimate, openapi_extra=devices_read_adds(
    "conditions on `user_ids`, `attributes` and `topics` (else 403 `forbidden`)"))
async def estimate_audience(body: AudienceEstimateRequest, audience_split: AudienceSplit,
                            forecasts: Forecasts, held_back: HeldBack,
                            caller: Annotated[Caller, scoped(Scope.CAMPAIGNS_READ)]
                            ) -> AudienceEstimate:
    """How many devices the audience filter (the one of a campaign create) selects now;
    given the tags of a campaign's translations (``languages``), how they split by the variant
    each would get; and, given its ``rate_per_s``, ``lane`` and ``rollout``, when a campaign
    created now would reach its last recipient (``finishes_in_s``); and how many devices of
    the audience its purpose keeps from it, by rule (``held_back``). A read: it changes nothing,
    so anyone who may read campaigns may ask, over the whole fleet (push and marketing consent,
    platforms, locales); conditions that can single out devices (``user_ids``, ``attributes``,
    ``topics``) need ``devices:read`` too (403 ``forbidden`` otherwise): a count under them
    tells one device's fields (a viewer read one user's e-mail in 130 counts)."""
    if body.audience.names_devices and not allows(caller.key.role, Scope.DEVICES_READ):
        raise ApiError(403, "forbidden", (
            f"the key {caller.key.name!r} ({caller.key.role.value}) may count devices by push "
            "and marketing consent, platform and locale only: user_ids, attributes and topics "
            f"can single out a device and need the scope {Scope.DEVICES_READ.value} "
            f"(roles {', '.join(r.value for r in roles_allowed(Scope.DEVICES_READ))})"))
    reached = reach(body.audience, body.purpose)
    devices, by_language = await audience_split(reached, body.languages)
    forecast = await forecasts.new_campaign(devices, body.lane, body.rate_per_s,
                                            rollout_of(body.rollout))
    held = await held_back(Asked(body.audience, reached, body.purpose, devices,
                                 quiet_hours_of(body.quiet_hours, body.purpose, body.timezone),
                                 body.frequency_cap),
                           forecast.at)
    return AudienceEstimate(devices=devices, by_language=by_language, held_back=held.by_rule,
                            quiet_hours_until=held.quiet_hours_until,
                            finishes_in_s=_not_before(forecast, held.quiet_hours_until),
                            **forecast_fields(forecast))


def _not_before(forecast: Forecast, until: datetime | None) -> float | None:
    """Seconds to the last recipient: never before the last one quiet hours hold."""
    if until is None or forecast.finishes_in_s is None:
        return forecast.finishes_in_s
    return max(forecast.finishes_in_s, (until - forecast.at).total_seconds())
