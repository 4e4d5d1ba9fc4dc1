"""What route handlers get from the composition root, through FastAPI's dependency injection:
each route depends on the one use case it calls (a service-layer function with its repository
bound, or a use-case object), never on the whole of ``AppServices``.

``AppServices`` is what the composition root (``app.py``) built; the middleware in front of the
routes (the access gate, the operator log) and the providers below read it from the app's state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from herald.adapters.rate_limit import FailedAuthentications, RequestBudget
from herald.adapters.redis import StreamSlots
from herald.contracts.device_lines import DeviceLine
from herald.contracts.http import (
    CampaignPatch,
    DeviceIn,
    Preview,
    PreviewRequest,
    ScheduleCreate,
)
from herald.domain.access import Actor, ApiKey, Role
from herald.domain.audience import Audience
from herald.domain.device_import import ImportReport, LineProblem
from herald.domain.documents import Campaign, Outcome, Schedule, UpsertCounts
from herald.domain.pods import PodBeat
from herald.domain.status import CancelDecision, PauseDecision, Status
from herald.runtime.tasks import Background
from herald.service_layer import approval, queries, scheduling
from herald.service_layer.access import (
    Authenticator,
    MintedKey,
    OperatorLog,
    mint_key,
    revoke_key,
)
from herald.service_layer.approval import ApprovalGate
from herald.service_layer.campaign_events import campaign_events
from herald.service_layer.campaigns import CampaignCreator, edit_scheduled
from herald.service_layer.device_import import import_devices
from herald.service_layer.devices import register_devices
from herald.service_layer.erasure import Erasure, erase_user, unregister_device
from herald.service_layer.forecasting import Forecaster
from herald.service_layer.holding_back import HoldingBack
from herald.service_layer.ports import (
    ApiKeyRepository,
    ArchivedErasures,
    FrequencyCaps,
    OperatorLogRepository,
    PodRegistry,
    Stores,
    TestSendRepository,
)
from herald.service_layer.preview import preview
from herald.service_layer.recipients import RecipientLine, variants_of
from herald.service_layer.stopping import Decided, Decider
from herald.service_layer.test_sends import TestSender
from herald.settings import Settings
from services.api.bodies import BodyChecks
from services.api.readiness import Readiness
from services.api.streams import WatchCampaign

T = TypeVar("T")


@dataclass(frozen=True)
class AppServices:
    pod_id: str
    settings: Settings
    stores: Stores
    creator: CampaignCreator
    decider: Decider
    registry: PodRegistry
    readiness: Readiness
    background: Background
    authenticator: Authenticator
    operator_log: OperatorLog
    request_budget: RequestBudget
    failed_authentications: FailedAuthentications
    stream_slots: StreamSlots
    frequency_caps: FrequencyCaps
    archived_erasures: ArchivedErasures
    holding_back: HoldingBack
    approvals: ApprovalGate
    test_sender: TestSender
    forecaster: Forecaster
    body_checks: BodyChecks


def app_services(request: Request) -> AppServices:
    services: AppServices = request.app.state.services
    return services


def provided(pick: Callable[[AppServices], T]) -> Any:
    """A FastAPI dependency: ``pick`` applied to what the composition root built."""
    def provide(request: Request) -> T:
        return pick(app_services(request))
    return Depends(provide)


CheckBody = Annotated[BodyChecks, provided(lambda s: s.body_checks)]
"""Validate a body declared ``checked_later`` off the event loop."""


# --- campaigns ------------------------------------------------------------------------------
UrgentRoles = Annotated[frozenset[str], provided(lambda s: s.settings.urgent_role_names)]
"""Roles whose keys may send in the urgent lane (``HERALD_URGENT_ROLES``)."""
TransactionalRoles = Annotated[frozenset[str],
                               provided(lambda s: s.settings.transactional_role_names)]
"""Roles whose keys may send transactional campaigns (``HERALD_TRANSACTIONAL_ROLES``)."""
FrequencyCapRoles = Annotated[frozenset[str],
                              provided(lambda s: s.settings.frequency_cap_role_names)]
"""Roles whose keys may give a campaign its own frequency cap (``HERALD_FREQUENCY_CAP_ROLES``)."""
QuietHoursRoles = Annotated[frozenset[str], provided(lambda s: s.settings.quiet_hours_role_names)]
"""Roles whose keys may give a campaign its own quiet hours (``HERALD_QUIET_HOURS_ROLES``)."""
Creator = Annotated[CampaignCreator, provided(lambda s: s.creator)]
"""Create, retry, retarget, amend, correct."""
CancelUseCase = Annotated[Callable[..., Awaitable[Decided[CancelDecision]]],
                          provided(lambda s: s.decider.cancel)]
PauseUseCase = Annotated[Callable[..., Awaitable[Decided[PauseDecision]]],
                         provided(lambda s: s.decider.pause)]
ResumeUseCase = Annotated[
    Callable[[str, Role, Actor], Awaitable[Campaign]],
    provided(lambda s: partial(approval.resume_within_approval, s.stores.campaigns,
                               s.decider.resume))]
"""The stopping protocol's resume, unless it skips an approved rollout's hold for someone who
could not approve it (``approval.resume_within_approval``)."""
FindCampaign = Annotated[Callable[[str], Awaitable[Campaign]],
                         provided(lambda s: partial(queries.campaign, s.stores.campaigns))]
ListCampaigns = Annotated[
    Callable[[list[Status] | None, str | None, int], Awaitable[queries.Page[Campaign]]],
    provided(lambda s: partial(queries.campaigns, s.stores.campaigns))]
AuditRecipients = Annotated[
    Callable[[str, Outcome], Awaitable[AsyncIterator[RecipientLine]]],
    provided(lambda s: partial(queries.recipients, s.stores))]
AffectedLanguages = Annotated[
    Callable[[Campaign, Outcome], Awaitable[dict[str, int]]],
    provided(lambda s: partial(variants_of, s.stores))]
"""The languages a follow-up affects: the original's recipients of one outcome, by variant."""
EditScheduled = Annotated[
    Callable[[str, CampaignPatch, Role, Actor], Awaitable[Campaign | None]],
    provided(lambda s: partial(edit_scheduled, s.stores.campaigns, approvals=s.approvals))]
Approve = Annotated[
    Callable[[str, Role, Actor, str], Awaitable[Campaign]],
    provided(lambda s: partial(approval.approve, s.stores.campaigns, s.creator.wake_dispatcher))]
SendTest = Annotated[TestSender, provided(lambda s: s.test_sender)]
TestSends = Annotated[TestSendRepository, provided(lambda s: s.stores.test_sends)]


Watch = Annotated[WatchCampaign, provided(lambda s: WatchCampaign(
    partial(campaign_events, s.stores.campaigns), s.stream_slots, s.stores.api_keys,
    s.settings.api_streams_per_key))]

# --- devices and audiences -------------------------------------------------------------------
RegisterDevices = Annotated[Callable[[Sequence[DeviceIn]], Awaitable[UpsertCounts]],
                            provided(lambda s: partial(register_devices, s.stores.devices))]
ImportDevices = Annotated[
    Callable[[AsyncIterator[DeviceLine | LineProblem]], Awaitable[ImportReport]],
    provided(lambda s: partial(import_devices, s.stores.devices))]
"""A streamed import: lines in, batches written behind the reading (``device_import.py``)."""
UnregisterDevice = Annotated[Callable[[str], Awaitable[bool]],
                             provided(lambda s: partial(unregister_device, s.stores.devices))]
EraseUser = Annotated[Callable[[str], Awaitable[Erasure]], provided(lambda s: partial(
    erase_user, s.stores.devices, s.stores.chunks, s.stores.test_sends,
    caps=s.frequency_caps, archives=s.archived_erasures))]
"""A person leaves: their devices, and their place in every record (``erasure.py``)."""
AudienceSplit = Annotated[
    Callable[[Audience, Sequence[str]], Awaitable[tuple[int, dict[str, int] | None]]],
    provided(lambda s: partial(queries.audience_split, s.stores.devices))]
HeldBack = Annotated[HoldingBack, provided(lambda s: s.holding_back)]
"""What each rule holds back of an audience (the estimate's ``held_back``)."""
Forecasts = Annotated[Forecaster, provided(lambda s: s.forecaster)]
"""When a new campaign (or a sending one) is expected to reach its last recipient."""
PreviewMessage = Annotated[Callable[[PreviewRequest], Awaitable[Preview]],
                           provided(lambda s: partial(preview, s.stores.campaigns,
                                                      s.stores.devices, s.body_checks.run))]

# --- schedules ------------------------------------------------------------------------------
CreateSchedule = Annotated[Callable[[ScheduleCreate, Actor], Awaitable[Schedule]],
                           provided(lambda s: partial(scheduling.create_schedule,
                                                      s.stores.schedules))]
FindSchedule = Annotated[Callable[[str], Awaitable[Schedule]],
                         provided(lambda s: partial(queries.schedule, s.stores.schedules))]
ListSchedules = Annotated[Callable[[str | None, int], Awaitable[queries.Page[Schedule]]],
                          provided(lambda s: partial(queries.schedules, s.stores.schedules))]
Replan = Annotated[Callable[[str, dict[str, Any], Actor], Awaitable[Schedule | None]],
                   provided(lambda s: partial(scheduling.replan, s.stores.schedules))]
EndSchedule = Annotated[Callable[[str, Actor], Awaitable[Schedule | None]],
                        provided(lambda s: partial(scheduling.end_schedule, s.stores.schedules))]
MisfireGrace = Annotated[float, provided(lambda s: s.settings.misfire_grace_s)]
"""How late a run may fire, as a schedule's view shows it."""

# --- access ---------------------------------------------------------------------------------
MintKey = Annotated[Callable[[str, Role, datetime | None, Actor, str | None],
                             Awaitable[MintedKey]],
                    provided(lambda s: partial(mint_key, s.stores.api_keys))]
RevokeKey = Annotated[Callable[[str, Actor], Awaitable[ApiKey]],
                      provided(lambda s: partial(revoke_key, s.stores.api_keys))]
ApiKeys = Annotated[ApiKeyRepository, provided(lambda s: s.stores.api_keys)]
OperatorLogEntries = Annotated[OperatorLogRepository, provided(lambda s: s.stores.operator_log)]

# --- operations -----------------------------------------------------------------------------
PodId = Annotated[str, provided(lambda s: s.pod_id)]
ReadinessCheck = Annotated[Readiness, provided(lambda s: s.readiness)]



@dataclass(frozen=True)
class LivePods:
    """The pod registry as ``GET /v1/pods`` shows it: live pods and the heartbeat's rules."""

    registry: PodRegistry
    heartbeat_interval_s: float
    heartbeat_ttl_s: float
    heartbeat_misses: int

    async def live(self) -> list[PodBeat]:
        return await self.registry.live()


Pods = Annotated[LivePods, provided(lambda s: LivePods(
    s.registry, s.settings.heartbeat_interval_s, s.settings.heartbeat_ttl_s,
    s.settings.heartbeat_misses))]
