"""``/v1/campaigns``: create, read, list, audit, cancel, retarget, amend and correct campaigns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from herald.contracts.http import (
    AmendRequest,
    ApproveRequest,
    CampaignCreate,
    CampaignCreated,
    CampaignPage,
    CampaignPatch,
    CampaignView,
    CancelRequest,
    CancelResult,
    CorrectRequest,
    CorrectResult,
    ErrorResponse,
    PauseRequest,
    PauseResult,
    Preview,
    PreviewRequest,
    RetargetRequest,
    RetryRequest,
    TestSendPage,
    TestSendRequest,
    TestSendView,
)
from herald.domain.access import Scope, allows
from herald.domain.approval import Refusal
from herald.domain.documents import Campaign, Outcome
from herald.domain.status import PauseDecision, Status
from herald.domain.types import OBJECT_ID_PATTERN
from herald.observability import API_REFUSED
from herald.service_layer.approval import ApprovalRefused
from herald.service_layer.campaign_events import CampaignChanged, Event
from herald.service_layer.test_sends import FcmMisconfigured, UnknownDevices
from services.api.audit import MEDIA_TYPES, AuditFormat, audit_format, download_headers, encoded
from services.api.auth import (
    Caller,
    devices_read_adds,
    require_frequency_cap,
    require_lane,
    require_purpose,
    require_quiet_hours,
    scoped,
)
from services.api.bodies import BodyChecks, checked_later
from services.api.deps import (
    AffectedLanguages,
    Approve,
    AuditRecipients,
    CancelUseCase,
    CheckBody,
    Creator,
    EditScheduled,
    FindCampaign,
    Forecasts,
    FrequencyCapRoles,
    ListCampaigns,
    PauseUseCase,
    PreviewMessage,
    QuietHoursRoles,
    ResumeUseCase,
    SendTest,
    TestSends,
    TransactionalRoles,
    UrgentRoles,
    Watch,
)
from services.api.errors import ApiError, not_found
from services.api.operator_log import OperatorLoggedRoute, log_detail, logged
from services.api.streams import StreamLease
from services.api.views import (
    campaign_view,
    correct_result,
    eta_view,
    pause_info,
    view_of_test_send,
)

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"], route_class=OperatorLoggedRoute)
Reader = Annotated[Caller, scoped(Scope.CAMPAIGNS_READ)]
Sender = Annotated[Caller, scoped(Scope.CAMPAIGNS_SEND)]
Canceller = Annotated[Caller, scoped(Scope.CAMPAIGNS_CANCEL)]
Approver = Annotated[Caller, scoped(Scope.CAMPAIGNS_APPROVE)]

CampaignId = Annotated[str, Path(pattern=OBJECT_ID_PATTERN.pattern,
                                 description="Campaign id: 24 lowercase hex digits")]
IdempotencyKey = Annotated[str | None, Header(
    max_length=200, description="A retry with the same key (from the same API key) and the same "
                                "body gets the first answer back instead of a second campaign")]


@router.post("", status_code=202, response_model=CampaignCreated,
             openapi_extra=logged("campaign.create"))
async def create_campaign(
    raw: Annotated[dict[str, Any], checked_later(CampaignCreate)], check: CheckBody,
    creator: Creator, request: Request, response: Response,
    caller: Sender, urgent_roles: UrgentRoles, transactional_roles: TransactionalRoles,
    frequency_cap_roles: FrequencyCapRoles, quiet_hours_roles: QuietHoursRoles,
    idempotency_key: IdempotencyKey = None,
) -> CampaignCreated:
    body = await check(CampaignCreate, raw)
    require_lane(caller, body.lane, urgent_roles)
    require_purpose(caller, body.purpose, transactional_roles)
    require_frequency_cap(caller, body.frequency_cap, frequency_cap_roles)
    require_quiet_hours(caller, body.quiet_hours, quiet_hours_roles)
    result = await creator.create(body, idempotency_key, caller.actor)
    log_detail(request, lane_detail(result.campaign))
    if not result.created:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/campaigns/{result.campaign.id}"
    return CampaignCreated(id=result.campaign.id, status=result.campaign.status)


@router.post("/preview", response_model=Preview)
async def preview_message(raw: Annotated[dict[str, Any], checked_later(PreviewRequest)],
                          check: CheckBody, make: PreviewMessage, _: Sender) -> Preview:
    """The exact FCM message one device (by token, or the newest of a user) would get from this
    content or campaign: its translation, its placeholders filled in, every option; nothing is
    sent or stored. Whoever may create campaigns may preview (it reads devices' fields)."""
    return await make(await check(PreviewRequest, raw))


@router.get("/{campaign_id}", response_model=CampaignView)
async def get_campaign(campaign_id: CampaignId, find: FindCampaign, forecasts: Forecasts,
                       _: Reader) -> CampaignView:
    """The campaign, its live counts, and while it sends (``pending``, ``in_progress``) when
    its last recipient is expected (``eta``)."""
    campaign = await find(campaign_id)
    view = campaign_view(campaign)
    view.eta = eta_view(await forecasts.campaign(campaign))
    return view


@router.get("", response_model=CampaignPage)
async def list_campaigns(
    list_page: ListCampaigns, _: Reader,
    status: Annotated[list[Status] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=OBJECT_ID_PATTERN.pattern,
                                        description="next_cursor of the previous page")] = None,
) -> CampaignPage:
    page = await list_page(status, cursor, limit)
    return CampaignPage(items=[campaign_view(c) for c in page.items], next_cursor=page.next_cursor)


@router.get("/{campaign_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-sent events `campaign`, each with the JSON "
                                            "of GET /v1/campaigns/{id}: the state at once, then "
                                            "every change, until a final status"}})
async def campaign_events_stream(campaign_id: CampaignId, watch: Watch,
                                 caller: Reader) -> StreamingResponse:
    """Live status and counts: an event now, one per change, a comment every ~15 s when
    quiet; the stream ends after the event with a final status, or within seconds of its key's
    revocation or expiry. A key holds at most ``HERALD_API_STREAMS_PER_KEY`` streams open (429
    ``too_many_streams``). Reconnect to resume: the first event is always the current state."""
    lease = await watch.lease(caller.key)
    if lease is None:
        API_REFUSED.labels("too_many_streams").inc()
        raise ApiError(429, "too_many_streams",
                       f"the key {caller.key.name!r} holds {watch.streams_per_key}"
                       " event streams open already; close one", headers={"Retry-After": "5"})
    try:
        events = await watch.events(campaign_id, keep_going=lease.holds)
    except BaseException:
        await lease.release()
        raise
    return StreamingResponse(_server_sent(events, lease), media_type="text/event-stream",
                             headers=SSE_HEADERS)


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _server_sent(events: AsyncIterator[Event], lease: StreamLease) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            if isinstance(event, CampaignChanged):
                data = campaign_view(event.campaign).model_dump_json(by_alias=True)
                yield f"event: campaign\nid: {event.seq}\ndata: {data}\n\n".encode()
            else:
                yield b": keep-alive\n\n"
    finally:
        await lease.release()


@router.get("/{campaign_id}/recipients", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}},
                             "description": "NDJSON: one JSON object per line (token, user_id, "
                                            "outcome, error); CSV: a header row, then the same "
                                            "columns"}},
            openapi_extra=devices_read_adds("each token in full (else `…` and its last 8 "
                                            "characters)"))
async def list_recipients(
    campaign_id: CampaignId, audit: AuditRecipients, caller: Reader,
    outcome: Annotated[Outcome, Query()],
    requested_format: Annotated[AuditFormat | None, Query(
        alias="format",
        description="ndjson (default) or csv; `Accept: text/csv` also asks for CSV")] = None,
    accept: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """The audit of one outcome: each recipient's token, user id, outcome, error and variant.
    Tokens in full for a key with ``devices:read`` (operator, admin), masked for others."""
    lines = await audit(campaign_id, outcome)
    fmt = audit_format(requested_format, accept)
    shown = allows(caller.key.role, Scope.DEVICES_READ)
    return StreamingResponse(encoded(lines, fmt, tokens_shown=shown), media_type=MEDIA_TYPES[fmt],
                             headers=download_headers(campaign_id, outcome, fmt))


@router.post("/{campaign_id}/cancel", response_model=CancelResult,
             responses={202: {"model": CancelResult, "description": "Pods are stopping"}},
             openapi_extra=logged("campaign.cancel"))
async def cancel_campaign(
    campaign_id: CampaignId, cancel: CancelUseCase, response: Response, caller: Canceller,
    body: CancelRequest | None = None,
) -> CancelResult:
    """Stop the campaign everywhere. The actor is the calling key; an ``X-Requested-By`` header
    is kept only as information (``on_behalf_of``)."""
    outcome = await cancel(campaign_id, body.reason if body else None, caller.actor,
                           on_behalf_of=caller.on_behalf_of)
    response.status_code = 200 if outcome.status is Status.CANCELLED else 202
    view = campaign_view(outcome.campaign)
    return CancelResult(id=view.id, status=view.status, counts=view.counts, cancel=view.cancel)


@router.post("/{campaign_id}/pause", response_model=PauseResult,
             responses={202: {"model": PauseResult, "description": "Pods are stopping"}},
             openapi_extra=logged("campaign.pause"))
async def pause_campaign(campaign_id: CampaignId, pause: PauseUseCase, response: Response,
                         caller: Canceller, body: PauseRequest | None = None) -> PauseResult:
    """Hold a sending campaign: every sender stops before its next FCM request, what was in
    flight is recorded, and the chunks not sent are kept for ``resume``. 202 while pods
    stop (``pause.settled_at`` null), 200 if it was paused already; 409 ``not_pausable``
    unless it is ``in_progress``. Who may: the responder role and up, like a cancel."""
    outcome = await pause(campaign_id, body.reason if body else None, caller.actor)
    return _paused(outcome.campaign, response, already=outcome.meaning is PauseDecision.ALREADY)


@router.post("/{campaign_id}/resume", response_model=PauseResult,
             openapi_extra=logged("campaign.resume"))
async def resume_campaign(campaign_id: CampaignId, resume: ResumeUseCase, response: Response,
                          caller: Sender) -> PauseResult:
    """Send the rest of a ``paused`` campaign: exactly the recipients not sent yet (409
    ``not_paused`` otherwise); a staged rollout held between waves starts its next wave. Who
    may: the operator role and up; a resume that skips the hold of an approved rollout only a
    person who could approve it (403 ``approval_required``)."""
    try:
        resumed = await resume(campaign_id, caller.key.role, caller.actor)
    except ApprovalRefused as refused:
        raise _refused(refused) from None
    return _paused(resumed, response, already=True)


def _paused(campaign: Campaign, response: Response, *, already: bool) -> PauseResult:
    response.status_code = 200 if already else 202
    view = campaign_view(campaign)
    return PauseResult(id=view.id, status=view.status, counts=view.counts,
                       pause=pause_info(campaign.pause))


@router.patch("/{campaign_id}", response_model=CampaignView,
              openapi_extra=logged("campaign.edit"))
async def patch_campaign(campaign_id: CampaignId, body: CampaignPatch, edit: EditScheduled,
                         caller: Sender, check: CheckBody, find: FindCampaign) -> CampaignView:
    """Change the time or content of a campaign that is still ``scheduled`` or
    ``awaiting_approval`` (else 409), or ``rate_per_s`` alone while it is pending, sending or
    paused: every sender follows the new rate within a second. A change of content, audience
    or options, a higher (or no) rate cap or an earlier time revokes its approval: it waits
    ``awaiting_approval`` for a new one; a lower cap, a later time or a new name keep it. Once
    it sends, a rate cap above the approved one only a person who could approve it may set
    (403 ``approval_required``)."""
    if body.model_fields_set - {"rate_per_s"}:
        await _templates_ahead(check, find, campaign_id, body)
    try:
        updated = await edit(campaign_id, body, caller.key.role, caller.actor)
    except ApprovalRefused as refused:
        raise _refused(refused) from None
    if updated is None:
        raise not_found(campaign_id)
    return campaign_view(updated)


async def _templates_ahead(check: BodyChecks, find: FindCampaign, campaign_id: str,
                           body: object | None) -> None:
    """What an edit or a follow-up will check (the campaign's content with the request's
    changes), checked first off the event loop: the use case's check then finds it done."""
    await check.templates_ahead((await find(campaign_id)).content, body)


def lane_detail(campaign: Campaign) -> str:
    """What the operator log says of a campaign just made: its lane and purpose (an urgent or
    transactional send is a privilege: the log shows who used it; ``purpose=legacy`` for a
    follow-up of a campaign stored before purposes existed)."""
    purpose = campaign.purpose.value if campaign.purpose else "legacy"
    return f"lane={campaign.lane.value} purpose={purpose}"


async def _require_follow_up_purpose(caller: Caller, find: FindCampaign, campaign_id: str,
                                     body: RetryRequest | None,
                                     transactional_roles: frozenset[str],
                                     frequency_cap_roles: frozenset[str]) -> None:
    """The scopes of the purpose and frequency cap a follow-up takes: those asked, else its
    original's."""
    asked = body if isinstance(body, RetargetRequest) else None
    original = await find(campaign_id)
    require_purpose(caller, (asked.purpose if asked else None) or original.purpose,
                    transactional_roles)
    cap = asked.frequency_cap if asked and asked.frequency_cap is not None else \
        original.frequency_cap
    require_frequency_cap(caller, cap, frequency_cap_roles)


async def _not_sent_languages(affected: AffectedLanguages, original: Campaign,
                              body: RetargetRequest | None) -> dict[str, int]:
    """A retarget's languages: the original's unsent recipients by variant, and its
    suppressed ones if it asked for them."""
    languages = await affected(original, Outcome.UNSENT)
    if body is not None and body.include_suppressed:
        for variant, count in (await affected(original, Outcome.SUPPRESSED)).items():
            languages[variant] = languages.get(variant, 0) + count
    return languages


def _created(request: Request, response: Response, campaign: Campaign | None, campaign_id: str,
             languages: dict[str, int] | None = None) -> CampaignCreated:
    """The answer of a route that made a follow-up of ``campaign_id`` (None: it is unknown)."""
    if campaign is None:
        raise not_found(campaign_id)
    log_detail(request, lane_detail(campaign))
    response.headers["Location"] = f"/v1/campaigns/{campaign.id}"
    return CampaignCreated(id=campaign.id, status=campaign.status, languages=languages)


async def _follow_up_of(find: FindCampaign, affected: AffectedLanguages, request: Request,
                        response: Response, made: Campaign | None, campaign_id: str,
                        outcome: Outcome) -> CampaignCreated:
    """A retarget's or amend's answer, with the languages of the original it affects."""
    if made is None:
        raise not_found(campaign_id)
    return _created(request, response, made, campaign_id,
                    await affected(await find(campaign_id), outcome))


@router.post("/{campaign_id}/retry", status_code=202, response_model=CampaignCreated,
             openapi_extra=logged("campaign.retry"))
async def retry_campaign(campaign_id: CampaignId, creator: Creator, request: Request,
                         response: Response, caller: Sender, check: CheckBody,
                         find: FindCampaign, transactional_roles: TransactionalRoles,
                         frequency_cap_roles: FrequencyCapRoles,
                         body: RetryRequest | None = None,
                         idempotency_key: IdempotencyKey = None) -> CampaignCreated:
    """Re-run a ``failed`` campaign for the recipients it did not reach (not dead tokens),
    in its lane and purpose, with its staged rollout unless ``rollout`` says otherwise."""
    await _require_follow_up_purpose(caller, find, campaign_id, body, transactional_roles,
                                     frequency_cap_roles)
    await _templates_ahead(check, find, campaign_id, body)
    return _created(request, response, await creator.retry(
        campaign_id, caller.actor, idempotency_key, body), campaign_id)


@router.post("/{campaign_id}/retarget", status_code=202, response_model=CampaignCreated,
             openapi_extra=logged("campaign.retarget"))
async def retarget_campaign(campaign_id: CampaignId, creator: Creator, request: Request,
                            response: Response,
                            caller: Sender, find: FindCampaign, affected: AffectedLanguages,
                            urgent_roles: UrgentRoles, check: CheckBody,
                            transactional_roles: TransactionalRoles,
                            frequency_cap_roles: FrequencyCapRoles,
                            body: RetargetRequest | None = None,
                            idempotency_key: IdempotencyKey = None) -> CampaignCreated:
    """A new campaign to exactly the ``unsent`` recipients of a finished one; ``languages``:
    those recipients by the variant of the original they would have got."""
    require_lane(caller, body.lane if body else None, urgent_roles)
    await _require_follow_up_purpose(caller, find, campaign_id, body, transactional_roles,
                                     frequency_cap_roles)
    await _templates_ahead(check, find, campaign_id, body)
    made = await creator.retarget(campaign_id, body or RetargetRequest(), caller.actor,
                                  idempotency_key)
    if made is None:
        raise not_found(campaign_id)
    return _created(request, response, made, campaign_id,
                    await _not_sent_languages(affected, await find(campaign_id), body))


@router.post("/{campaign_id}/amend", status_code=202, response_model=CampaignCreated,
             openapi_extra=logged("campaign.amend"))
async def amend_campaign(campaign_id: CampaignId, creator: Creator, request: Request,
                         response: Response,
                         caller: Sender, find: FindCampaign, affected: AffectedLanguages,
                         urgent_roles: UrgentRoles, check: CheckBody,
                         transactional_roles: TransactionalRoles,
                         frequency_cap_roles: FrequencyCapRoles,
                         body: AmendRequest | None = None,
                         idempotency_key: IdempotencyKey = None) -> CampaignCreated:
    """A new campaign to exactly the ``sent`` recipients of a finished one, with its
    replacement key: on their devices the new notification replaces the old one. 409
    ``not_amendable`` while it runs, ``nothing_to_amend`` if FCM accepted none of it.
    ``languages``: those recipients by the variant of the original they got."""
    require_lane(caller, body.lane if body else None, urgent_roles)
    await _require_follow_up_purpose(caller, find, campaign_id, body, transactional_roles,
                                     frequency_cap_roles)
    await _templates_ahead(check, find, campaign_id, body)
    made = await creator.amend(campaign_id, body or AmendRequest(), caller.actor,
                               idempotency_key)
    return await _follow_up_of(find, affected, request, response, made, campaign_id,
                               Outcome.SENT)


@router.post("/{campaign_id}/correct", status_code=202, response_model=CorrectResult,
             openapi_extra=logged("campaign.correct"))
async def correct_campaign(campaign_id: CampaignId, creator: Creator, request: Request,
                           caller: Sender, affected: AffectedLanguages,
                           urgent_roles: UrgentRoles, check: CheckBody, find: FindCampaign,
                           transactional_roles: TransactionalRoles,
                           frequency_cap_roles: FrequencyCapRoles,
                           body: CorrectRequest | None = None,
                           idempotency_key: IdempotencyKey = None) -> CorrectResult:
    """Correct a finished campaign in one step: the new content as a new notification to its
    ``unsent`` recipients (a retarget) and as a replacement to its ``sent`` ones (an amend).
    Nobody gets both. 409 ``not_correctable`` while it runs, ``nothing_to_correct`` if it
    left nobody in either group."""
    require_lane(caller, body.lane if body else None, urgent_roles)
    await _require_follow_up_purpose(caller, find, campaign_id, body, transactional_roles,
                                     frequency_cap_roles)
    await _templates_ahead(check, find, campaign_id, body)
    correction = await creator.correct(campaign_id, body or CorrectRequest(),
                                                caller.actor, idempotency_key)
    if correction is None:
        raise not_found(campaign_id)
    original = correction.original
    result = correct_result(
        correction,
        retarget=await _not_sent_languages(affected, original, body)
        if correction.retarget else {},
        amend=await affected(original, Outcome.SENT) if correction.amend else {})
    halves = [f"{half}={made.id}" for half, made in
              (("retarget", correction.retarget), ("amend", correction.amend)) if made]
    made = correction.retarget or correction.amend
    log_detail(request, " ".join([*halves, lane_detail(made)] if made else halves))
    return result


APPROVAL_STATUS = {Refusal.NO_SCOPE: 403, Refusal.OWN_CAMPAIGN: 403, Refusal.NOT_AWAITING: 409,
                   Refusal.CHANGED: 409, Refusal.NEEDS_APPROVAL: 403}


def _refused(refused: ApprovalRefused) -> ApiError:
    return ApiError(APPROVAL_STATUS[refused.refusal], refused.refusal.value, str(refused))


@router.post("/{campaign_id}/approve", response_model=CampaignView,
             responses={403: {"model": ErrorResponse, "description": "`self_approval`: the "
                              "approving key's person created the campaign, or changed it "
                              "(or its schedule's template) since its last approval"}},
             openapi_extra=logged("campaign.approve"))
async def approve_campaign(campaign_id: CampaignId, body: ApproveRequest, approve: Approve,
                           request: Request, caller: Approver) -> CampaignView:
    """Approve a campaign ``awaiting_approval`` as you read it (``digest``: its
    ``content_digest``, required) with a key of a person other than whoever created it or
    changed it since its last approval: it is sent at once if due (``pending``), or fires at
    its time (``scheduled``). 403 ``self_approval``, 409 ``not_awaiting_approval`` or
    ``approval_stale`` (the campaign changed since the `digest` given), 422 without a
    digest; a refused approval changes nothing."""
    try:
        approved = await approve(campaign_id, caller.key.role, caller.actor, body.digest)
    except ApprovalRefused as refused:
        raise _refused(refused) from None
    if approved.approval is not None:
        log_detail(request, f"digest={approved.approval.digest} now {approved.status.value}")
    return campaign_view(approved)


@router.post("/{campaign_id}/test", response_model=TestSendView,
             responses={502: {"model": ErrorResponse, "description": "`fcm_misconfigured`: "
                              "FCM refused Herald's project or credentials"}},
             openapi_extra=logged("campaign.test"))
async def test_campaign(campaign_id: CampaignId, body: TestSendRequest, sender: SendTest,
                        request: Request, caller: Sender) -> TestSendView:
    """Send the campaign's exact message (the senders' body) to the named devices only, in
    any status before it finishes. Each device's outcome is answered and recorded apart: never
    in the campaign's counts or audit. 422 ``unknown_devices`` (naming them; nothing sent),
    ``too_many_devices`` (over 100 in a call, or over the campaign's distinct devices for test
    sends), ``push_disabled``, 429 ``tested_too_often``, 409 ``not_testable``, 502
    ``fcm_misconfigured``."""
    try:
        record = await sender.send(campaign_id, body.tokens, body.user_ids, caller.actor)
    except UnknownDevices as unknown:
        raise ApiError(422, "unknown_devices", str(unknown),
                       details=[{"loc": ["body", unknown.kind], "unknown": unknown.unknown}]
                       ) from None
    except FcmMisconfigured as refused:
        view = view_of_test_send(refused.record)
        raise ApiError(502, "fcm_misconfigured", str(refused), details=[
            o.model_dump() for o in view.outcomes]) from None
    view = view_of_test_send(record)
    log_detail(request, f"devices={len(view.outcomes)} accepted={view.accepted} "
                        f"failed={view.failed}")
    return view


@router.get("/{campaign_id}/tests", response_model=TestSendPage)
async def list_test_sends(campaign_id: CampaignId, find: FindCampaign, tests: TestSends,
                          _: Reader) -> TestSendPage:
    """The campaign's test sends, newest first (the last 50)."""
    await find(campaign_id)
    return TestSendPage(items=[view_of_test_send(r) for r in await tests.of_campaign(campaign_id)])
