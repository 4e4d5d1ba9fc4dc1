"""What a sender needs to know about the campaigns whose chunks it receives, cached.

A campaign's content never changes once it is sending, so it is read from MongoDB once per pod.
Whether it was cancelled is answered from memory (the broadcast), and, at most once a second per
campaign, from its Redis flag, for the cancel this pod might have missed. Its status and rate are
read again every ``STATUS_REFRESH_S`` while it sends: a pause this pod missed stops it there,
and a rate changed by ``PATCH`` takes effect across the fleet within that and one token block.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from herald.domain.documents import Campaign
from herald.domain.rendering import CompiledContent, compile_content
from herald.domain.rollout import Rollout, in_waves_up_to
from herald.domain.status import ACTIVE, Status
from herald.service_layer.cancel_watch import CancelWatch
from herald.service_layer.cancellation import FLAG_REFRESH_S
from herald.service_layer.ports import CampaignRepository

CACHE_SIZE = 1000
STATUS_REFRESH_S = 0.25
"""How often a sender re-reads the status and rate of a campaign it sends (one MongoDB read)."""


@dataclass
class CampaignInfo:
    content: CompiledContent
    """Compiled once per pod: the shared message, or each variant's texts and parts."""
    rate_per_s: int | None
    flag_checked_at: float = field(default_factory=time.monotonic)
    status_read_at: float = field(default_factory=time.monotonic)
    rollout: Rollout | None = None
    wave: int = 0
    """A staged rollout's wave being sent (read again with the status)."""

    def admits(self, campaign_id: str, token: str, wave: int) -> bool:
        """Whether the recipient is sent in waves up to ``wave`` (all are without a rollout)."""
        return self.rollout is None or in_waves_up_to(campaign_id, token, self.rollout, wave)


def _wave(campaign: Campaign) -> int:
    progress = campaign.rollout_progress
    return 0 if progress is None else progress.wave


UNKNOWN = "unknown"
"""What ``get`` answers for a campaign that does not exist (a forged or misrouted chunk)."""


def message_of(campaign: Campaign) -> CompiledContent:
    """The FCM request each recipient of ``campaign`` gets, compiled (one message, or each
    variant's texts and parts): what the senders send, and what a test send sends
    (``test_sends.py``). The APNs expiry of a TTL is left open: each request is dated when it
    is sent (the window's ``_body``, a test send's own request)."""
    content = campaign.content
    return compile_content(content.title, content.body, content.data, content.translations,
                           image_url=content.image_url, options=content.options,
                           replace_key=campaign.sent_with_key)


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
        self._learn_status(campaign_id, campaign.status)
        if campaign.status not in ACTIVE:
            return None
        info = CampaignInfo(message_of(campaign), campaign.rate_per_s,
                            rollout=campaign.rollout, wave=_wave(campaign))
        self._entries[campaign_id] = info
        if len(self._entries) > CACHE_SIZE:
            self._entries.popitem(last=False)
        return info

    async def still_sending(self, campaign_id: str) -> bool:
        """Whether the campaign is still sending, read from the store (not from memory)."""
        campaign = await self._campaigns.get(campaign_id)
        if campaign is not None:
            self._learn_status(campaign_id, campaign.status)
        return campaign is not None and campaign.status in ACTIVE

    def _learn_status(self, campaign_id: str, status: Status) -> None:
        """What the stored status says this pod must do: stop for a cancel, hold for a pause,
        send again after a resume."""
        if status in (Status.CANCELLING, Status.CANCELLED):
            self._watch.learn(campaign_id)
        elif status is Status.PAUSED:
            self._watch.pause(campaign_id)
        elif self._watch.is_paused(campaign_id):
            self._watch.resume(campaign_id)

    async def refresh(self, campaign_id: str, *, now: bool = False) -> None:
        """Read the campaign's status, rate and wave again if they are older than
        ``STATUS_REFRESH_S`` (a pause or a rate change this pod did not hear), or ``now``."""
        info = self._entries.get(campaign_id)
        at = time.monotonic()
        if info is None or (not now and at - info.status_read_at < STATUS_REFRESH_S):
            return
        info.status_read_at = at
        campaign = await self._campaigns.get(campaign_id)
        if campaign is not None:
            info.rate_per_s = campaign.rate_per_s
            info.wave = _wave(campaign)
            self._learn_status(campaign_id, campaign.status)

    def held_here(self, campaign_id: str) -> bool:
        """Held by a pause, as this pod knows (memory only)."""
        return self._watch.is_paused(campaign_id)

    async def is_held(self, campaign_id: str) -> bool:
        """Held by a pause, confirmed from the store when memory says so (the resume may have
        reached the store before this pod)."""
        if not self._watch.is_paused(campaign_id):
            return False
        await self.still_sending(campaign_id)  # learns the status: resumed, paused or cancelled
        return self._watch.is_paused(campaign_id)

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
