"""Herald's records as the API shows them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

from herald.contracts.http import (
    ActorView,
    ApiKeyView,
    ApprovalView,
    ArchiveView,
    CampaignView,
    CancelInfo,
    CorrectResult,
    Counts,
    Eta,
    FollowUpCreated,
    GateView,
    LogEntryView,
    PauseInfo,
    RolloutView,
    RolloutWaveIn,
    ScheduleRun,
    ScheduleView,
    TestOutcomeView,
    TestSendView,
    VariantView,
    WaveFigures,
)
from herald.domain.access import Actor, ApiKey, LogEntry
from herald.domain.approval import approval_digest
from herald.domain.documents import Approval, Campaign, CampaignCounts, PauseRecord, Schedule, TestSend
from herald.domain.lanes import Lane
from herald.domain.quiet_hours import held_until
from herald.domain.status import TESTABLE, Status
from herald.service_layer.campaigns import Correction
from herald.service_layer.forecasting import Forecast
from herald.service_layer.scheduling import local_time


def counts_of(campaign: Campaign) -> Counts:
    """The live counts; while paused with nothing in flight, the exact counts of then."""
    pause, rollout = campaign.pause, campaign.rollout_progress
    if campaign.status is Status.PAUSED and pause is not None and pause.counts is not None:
        return _counts(pause.counts)
    if rollout is not None and campaign.status is Status.IN_PROGRESS:
        counts = campaign.counts  # a rollout's chunks stay pending until their last wave
        return _counts(replace(counts, sent=max(counts.sent, rollout.sent),
                               failed=max(counts.failed, rollout.failed)))
    return _counts(campaign.counts)


def _counts(counts: CampaignCounts) -> Counts:
    return Counts(targeted=counts.targeted, sent=counts.sent, failed=counts.failed,
                  unsent=counts.unsent, maybe_delivered=counts.maybe_delivered,
                  suppressed=counts.suppressed)


def campaign_view(campaign: Campaign) -> CampaignView:
    cancel, content, dispatch = campaign.cancel, campaign.content, campaign.dispatch
    follow_up = campaign.follow_up
    return CampaignView(
        id=campaign.id, name=campaign.name, status=campaign.status, title=content.title,
        body=content.body, image_url=content.image_url, data=content.data,
        options=content.options, translations=content.translations,
        audience=campaign.audience.model_dump(mode="json", by_alias=True)
        if campaign.audience else None,
        retarget={"campaign_id": follow_up.campaign_id, "outcome": follow_up.outcome.value}
        if follow_up else None,
        chunk_size=campaign.chunk_size, counts=counts_of(campaign),
        created_at=campaign.created_at, due_at=campaign.due_at, fired_at=campaign.fired_at,
        started_at=campaign.started_at, first_request_at=campaign.first_request_at,
        finished_at=campaign.finished_at,
        cancel=CancelInfo(requested_at=cancel.requested_at,
                          acknowledged_at=cancel.acknowledged_at, reason=cancel.reason,
                          requested_by=actor_view(cancel.requested_by),
                          on_behalf_of=cancel.on_behalf_of) if cancel else None,
        pause=pause_info(campaign.pause), rate_per_s=campaign.rate_per_s, lane=campaign.lane,
        purpose=campaign.purpose, frequency_cap=campaign.frequency_cap,
        quiet_hours=asdict(campaign.quiet_hours) if campaign.quiet_hours else None,
        quiet_hours_until=held_until(dispatch.waves or ()),
        rollout=rollout_view(campaign),
        created_by=actor_view(campaign.created_by), edited_by=actor_view(campaign.edited_by),
        schedule_id=campaign.schedule_id,
        local_time=asdict(campaign.local_time) if campaign.local_time else None,
        waves=[asdict(wave) for wave in dispatch.waves] if dispatch.waves is not None else None,
        error=campaign.error, replace_key=campaign.sent_with_key, amends=campaign.amends,
        amended_by=list(campaign.amended_by), approval_required=campaign.approval_required,
        audience_estimate=campaign.audience_estimate,
        content_digest=approval_digest(campaign),
        approval=approval_view(campaign.approval) if campaign.approval else None,
        approvals=[approval_view(a) for a in campaign.approvals],
        editors=actor_views(campaign.editors),
        testable=campaign.status in TESTABLE,
        archive=ArchiveView(**asdict(campaign.archive)) if campaign.archive else None,
        variants={tag: VariantView(**asdict(counts)) for tag, counts in campaign.variants.items()}
        if campaign.variants is not None else None)


def forecast_fields(forecast: Forecast) -> dict[str, Any]:
    """What a forecast rests on, as the answers show it (``ForecastFields``)."""
    return {"fleet_rate_per_s": round(forecast.fleet_rate_per_s, 1),
            "fleet_rate_measured": forecast.fleet_rate_measured,
            "recipients_ahead": forecast.recipients_ahead}


def eta_view(forecast: Forecast | None) -> Eta | None:
    if forecast is None:
        return None
    return Eta(finishes_in_s=forecast.finishes_in_s, finishes_at=forecast.finishes_at,
               **forecast_fields(forecast))


def approval_view(approval: Approval) -> ApprovalView:
    by = actor_view(approval.by)
    assert by is not None
    limits = approval.limits
    return ApprovalView(digest=approval.digest, by=by, at=approval.at,
                        rate_per_s=limits.rate_per_s if limits else None,
                        not_before=limits.due_at if limits else None,
                        revoked_at=approval.revoked_at,
                        revoked_by=actor_view(approval.revoked_by))


def rollout_view(campaign: Campaign) -> RolloutView | None:
    rollout, progress = campaign.rollout, campaign.rollout_progress
    if rollout is None or progress is None:
        return None
    halt, figures = rollout.halt_when, progress.figures
    return RolloutView(
        waves=[RolloutWaveIn(percent=w.percent, hold_s=w.hold_s) for w in rollout.waves],
        wave=progress.wave + 1, holding=progress.hold_until is not None,
        hold_until=progress.hold_until, checked_at=progress.checked_at,
        gate=GateView(failed=figures.failed, attempted=figures.attempted,
                      failure_rate=figures.failure_rate,
                      failure_rate_above=halt.failure_rate_above if halt else None,
                      min_attempts=halt.min_attempts if halt else None,
                      judged_since=progress.judged_since,
                      waves=[WaveFigures(wave=index + 1, failed=f.failed, attempted=f.attempted,
                                         failure_rate=f.failure_rate)
                             for index, f in enumerate(progress.wave_figures)]))


def pause_info(pause: PauseRecord | None) -> PauseInfo | None:
    if pause is None:
        return None
    return PauseInfo(kind=pause.kind.value, reason=pause.reason, requested_at=pause.requested_at,
                     requested_by=actor_view(pause.requested_by), settled_at=pause.settled_at,
                     counts=_counts(pause.counts) if pause.counts else None,
                     resumed_at=pause.resumed_at, resumed_by=actor_view(pause.resumed_by))


def correct_result(correction: Correction, *, retarget: dict[str, int],
                   amend: dict[str, int]) -> CorrectResult:
    """The answer of a correction; ``retarget`` and ``amend``: the languages each half
    affects (the original's recipients in it, by variant)."""
    counts = correction.original.counts
    return CorrectResult(campaign_id=correction.original.id,
                         retarget=follow_up_created(correction.retarget,
                                                    _expected(correction.retarget, counts),
                                                    retarget),
                         amend=follow_up_created(correction.amend, counts.sent, amend))


def _expected(follow_up: Campaign | None, original: CampaignCounts) -> int:
    """What a follow-up reaches of its original's final counts."""
    return 0 if follow_up is None or follow_up.follow_up is None else \
        follow_up.follow_up.size_in(original)


def follow_up_created(campaign: Campaign | None, expected: int,
                      languages: dict[str, int]) -> FollowUpCreated | None:
    if campaign is None:
        return None
    paged = campaign.dispatch.done  # its own count is exact once paging is over
    return FollowUpCreated(id=campaign.id, status=campaign.status, expected=expected,
                           targeted=campaign.counts.targeted if paged else None,
                           href=f"/v1/campaigns/{campaign.id}", languages=languages)


def schedule_view(schedule: Schedule, misfire_grace_s: float) -> ScheduleView:
    grace_s = misfire_grace_s if schedule.misfire_grace_s is None else schedule.misfire_grace_s
    return ScheduleView(
        id=schedule.id, name=schedule.name, state=schedule.state.value, cron=schedule.cron,
        timezone=schedule.timezone, template=template_view(schedule.template),
        misfire_grace_s=int(grace_s),
        next_run_at=schedule.next_run_at,
        next_run_local=local_time(schedule.next_run_at, schedule.timezone),
        runs=[ScheduleRun(**asdict(run)) for run in reversed(schedule.runs)],
        missed_total=schedule.missed_total, created_at=schedule.created_at,
        updated_at=schedule.updated_at, created_by=actor_view(schedule.created_by),
        updated_by=actor_view(schedule.updated_by),
        template_authors=actor_views(schedule.template_authors))


def template_view(template: dict[str, Any]) -> dict[str, Any]:
    """A schedule's template as stored, with the lane its runs take (``standard`` for one
    stored before lanes, or edited without naming one) and its purpose (null for one stored
    before purposes: its runs reach what its audience says)."""
    return {**template, "lane": template.get("lane") or Lane.STANDARD.value,
            "purpose": template.get("purpose")}


def actor_view(actor: Actor | None) -> ActorView | None:
    return None if actor is None else ActorView(id=actor.id, name=actor.name, kind=actor.kind,
                                                verified=actor.verified, owner=actor.owner)


def actor_views(actors: Iterable[Actor]) -> list[ActorView]:
    return [view for view in map(actor_view, actors) if view is not None]


def api_key_view(key: ApiKey) -> ApiKeyView:
    return ApiKeyView(id=key.id, prefix=key.prefix, name=key.name, role=key.role,
                      owner=key.person, created_at=key.created_at, created_by=actor_view(key.created_by),
                      expires_at=key.expires_at, last_used_at=key.last_used_at,
                      revoked_at=key.revoked_at, revoked_by=actor_view(key.revoked_by))


def log_entry_view(entry: LogEntry) -> LogEntryView:
    return LogEntryView(
        id=entry.id, at=entry.at, actor=actor_view(entry.actor), action=entry.action,
        outcome=entry.outcome, status_code=entry.status_code, target_kind=entry.target_kind,
        target_id=entry.target_id, campaign_id=entry.campaign_id, address=entry.address,
        on_behalf_of=entry.on_behalf_of, detail=entry.detail, count=entry.count)


def view_of_test_send(record: TestSend) -> TestSendView:
    by = actor_view(record.by)
    assert by is not None
    outcomes = [TestOutcomeView(device_id=o.device_id, token_suffix=o.token_suffix,
                                user_id=o.user_id, accepted=o.accepted, error=o.error,
                                message=o.message, erased=o.erased) for o in record.outcomes]
    accepted = sum(o.accepted for o in outcomes)
    return TestSendView(id=record.id, campaign_id=record.campaign_id, at=record.at, by=by,
                        status=record.status, accepted=accepted,
                        failed=len(outcomes) - accepted, outcomes=outcomes)
