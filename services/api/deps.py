"""What route handlers get from the composition root, through FastAPI's dependency injection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from herald.adapters.rate_limit import FailedAuthentications, RequestBudget
from herald.adapters.redis import StreamSlots
from herald.runtime.tasks import Background
from herald.service_layer.access import Authenticator, OperatorLog
from herald.service_layer.campaigns import CampaignCreator
from herald.service_layer.cancellation import Cancellation
from herald.service_layer.ports import PodRegistry, Stores
from herald.settings import Settings
from services.api.readiness import Readiness


@dataclass(frozen=True)
class AppServices:
    pod_id: str
    settings: Settings
    stores: Stores
    creator: CampaignCreator
    cancellation: Cancellation
    registry: PodRegistry
    readiness: Readiness
    background: Background
    authenticator: Authenticator
    operator_log: OperatorLog
    request_budget: RequestBudget
    failed_authentications: FailedAuthentications
    stream_slots: StreamSlots


def _services(request: Request) -> AppServices:
    services: AppServices = request.app.state.services
    return services


Services = Annotated[AppServices, Depends(_services)]
