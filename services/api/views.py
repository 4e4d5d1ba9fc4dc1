"""Campaign documents as the API shows them."""

from __future__ import annotations

from typing import Any

from herald.domain.api import CampaignView, CancelInfo, Counts, ScheduleRun, ScheduleView
from herald.service_layer.scheduling import local_time


def counts_of(campaign: dict[str, Any]) -> Counts:
    raw = campaign.get("counts") or {}
    targeted, sent, failed = (int(raw.get(k, 0)) for k in ("targeted", "sent", "failed"))
    return Counts(targeted=targeted, sent=sent, failed=failed,
                  unsent=max(0, targeted - sent - failed))


def campaign_view(campaign: dict[str, Any]) -> CampaignView:
    cancel = campaign.get("cancel")
    return CampaignView(
        id=str(campaign["_id"]), name=campaign.get("name"), status=campaign["status"],
        title=campaign["title"], body=campaign["body"], image_url=campaign.get("image_url"),
        data=campaign.get("data") or {}, audience=campaign.get("audience"),
        retarget=campaign.get("retarget"), chunk_size=campaign["chunk_size"],
        counts=counts_of(campaign), created_at=campaign["created_at"],
        due_at=campaign.get("due_at"), fired_at=campaign.get("fired_at"),
        started_at=campaign.get("started_at"),
        finished_at=campaign.get("finished_at"),
        cancel=CancelInfo(**{k: cancel.get(k) for k in CancelInfo.model_fields}) if cancel else None,
        schedule_id=campaign.get("schedule_id"), local_time=campaign.get("local_time"),
        waves=(campaign.get("dispatch") or {}).get("waves"), error=campaign.get("error"))


def schedule_view(schedule: dict[str, Any], misfire_grace_s: float) -> ScheduleView:
    return ScheduleView(
        id=str(schedule["_id"]), name=schedule.get("name"), state=schedule["state"],
        cron=schedule["cron"], timezone=schedule["timezone"], template=schedule["template"],
        misfire_grace_s=int(misfire_grace_s if schedule.get("misfire_grace_s") is None
                            else schedule["misfire_grace_s"]),
        next_run_at=schedule.get("next_run_at"),
        next_run_local=local_time(schedule.get("next_run_at"), schedule["timezone"]),
        runs=[ScheduleRun(**run) for run in reversed(schedule.get("runs") or [])],
        missed_total=schedule.get("missed_total", 0), created_at=schedule["created_at"],
        updated_at=schedule["updated_at"])
