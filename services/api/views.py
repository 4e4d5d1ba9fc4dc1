"""Campaign documents as the API shows them."""

from __future__ import annotations

from typing import Any

from herald.domain.api import CampaignView, CancelInfo, Counts


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
        due_at=campaign.get("due_at"), started_at=campaign.get("started_at"),
        finished_at=campaign.get("finished_at"),
        cancel=CancelInfo(**{k: cancel.get(k) for k in CancelInfo.model_fields}) if cancel else None,
        schedule_id=campaign.get("schedule_id"), error=campaign.get("error"))
