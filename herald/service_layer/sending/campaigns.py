"""What a sender needs to know about the campaigns whose chunks it receives, cached.

A campaign's content never changes once it is sending, so it is read from MongoDB once per pod.
Whether it was cancelled is answered from memory (the broadcast), and, at most once a second per
campaign, from its Redis flag, for the cancel this pod might have missed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from herald.domain.documents import Campaign
from herald.domain.rendering import CompiledContent, compile_content
from herald.domain.status import ACTIVE, Status
from herald.service_layer.cancel_watch import CancelWatch
from herald.service_layer.cancellation import FLAG_REFRESH_S
from herald.service_layer.ports import CampaignRepository

CACHE_SIZE = 1000


@dataclass
class CampaignInfo:
    content: CompiledContent
    """Compiled once per pod: the shared message, or each variant's texts and parts."""
    rate_per_s: int | None
    flag_checked_at: float = field(default_factory=time.monotonic)


UNKNOWN = "unknown"
"""What ``get`` answers for a campaign that does not exist (a forged or misrouted chunk)."""


def message_of(campaign: Campaign, now_s: float) -> CompiledContent:
    """The FCM request each recipient of ``campaign`` gets, compiled (one message, or each
    variant's texts and parts): what the senders send, and what a test send sends
    (``test_sends.py``). ``now_s`` dates the APNs expiry of a TTL."""
    content = campaign.content
    return compile_content(content.title, content.body, content.data, content.translations,
                           image_url=content.image_url, options=content.options,
                           replace_key=campaign.sent_with_key, now_s=now_s)


class CampaignCache:
    def __init__(self, campaigns: CampaignRepository, watch: CancelWatch) -> None:
        self._campaigns = campaigns
        self._watch = watch
        self._entries: OrderedDict[str, CampaignInfo] = OrderedDict()

    async def get(self, campaign_id: str) -> CampaignInfo | str | None:
        """The campaign's sending info; None if it is no longer sending; ``UNKNOWN`` if there
        is no such campaign."""
        info = self._entries.get(campaign_id)
        if info is not None:
            self._entries.move_to_end(campaign_id)
            return info
        campaign = await self._campaigns.get(campaign_id)
        if campaign is None:
            return UNKNOWN
        if campaign.status in (Status.CANCELLING, Status.CANCELLED):
            self._watch.learn(campaign_id)
        if campaign.status not in ACTIVE:
            return None
        info = CampaignInfo(message_of(campaign, time.time()), campaign.rate_per_s)
        self._entries[campaign_id] = info
        if len(self._entries) > CACHE_SIZE:
            self._entries.popitem(last=False)
        return info

    async def still_sending(self, campaign_id: str) -> bool:
        """Whether the campaign is still sending, read from the store (not from memory)."""
        campaign = await self._campaigns.get(campaign_id)
        if campaign is not None and campaign.status in (Status.CANCELLING, Status.CANCELLED):
            self._watch.learn(campaign_id)
        return campaign is not None and campaign.status in ACTIVE

    async def is_cancelled(self, campaign_id: str) -> bool:
        """Known cancelled here, or flagged in Redis (read at most once a second)."""
        if self._watch.knows(campaign_id):
            return True
        info = self._entries.get(campaign_id)
        now = time.monotonic()
        if info is not None and now - info.flag_checked_at < FLAG_REFRESH_S:
            return False
        if info is not None:
            info.flag_checked_at = now
        return await self._watch.is_cancelled(campaign_id)
