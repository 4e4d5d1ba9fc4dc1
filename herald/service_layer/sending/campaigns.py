"""What a sender needs to know about the campaigns whose chunks it receives, cached.

A campaign's content never changes once it is sending, so it is read from MongoDB once per pod.
Whether it may send is the pod's one question (``stopping/verdict.py``); every read of the
campaign made here tells the pod's view what its status says. Its rate and wave are read again
every ``STATUS_REFRESH_S`` while it sends: a rate changed by ``PATCH`` takes effect across the
fleet within that and one token block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from herald.clock import utcnow
from herald.domain.documents import Campaign
from herald.domain.lanes import Lane
from herald.domain.purpose import Purpose
from herald.domain.rendering import CompiledContent, compile_content
from herald.domain.rollout import Rollout, in_waves_up_to
from herald.domain.status import ACTIVE, Verdict
from herald.observability import FIRST_REQUEST_SECONDS
from herald.service_layer.ports import CampaignRepository
from herald.service_layer.stopping import PodView

log = logging.getLogger(__name__)

CACHE_SIZE = 1000
STATUS_REFRESH_S = 0.25
"""How often a sender re-reads the status and rate of a campaign it sends (one MongoDB read)."""


@dataclass
class CampaignInfo:
    content: CompiledContent
    """Compiled once per pod: the shared message, or each variant's texts and parts."""
    rate_per_s: int | None
    status_read_at: float = field(default_factory=time.monotonic)
    rollout: Rollout | None = None
    lane: Lane = Lane.STANDARD
    due_since: datetime | None = None
    first_request_noted: bool = False
    wave: int = 0
    """A staged rollout's wave being sent (read again with the status)."""
    purpose: Purpose | None = None
    frequency_cap: str | None = None
    """Its own frequency cap, if any (``sending/capping.py``)."""

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
    def __init__(self, campaigns: CampaignRepository, view: PodView) -> None:
        self._campaigns = campaigns
        self._view = view
        self._entries: OrderedDict[str, CampaignInfo] = OrderedDict()
        self._noting: set[asyncio.Task[None]] = set()

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
        self._view.learn(campaign)
        if campaign.status not in ACTIVE:
            return None
        info = CampaignInfo(message_of(campaign), campaign.rate_per_s,
                            rollout=campaign.rollout, wave=_wave(campaign), lane=campaign.lane,
                            due_since=campaign.due_since,
                            first_request_noted=campaign.first_request_at is not None,
                            purpose=campaign.purpose, frequency_cap=campaign.frequency_cap)
        self._entries[campaign_id] = info
        if len(self._entries) > CACHE_SIZE:
            self._entries.popitem(last=False)
        return info

    def note_first_request(self, campaign_id: str, info: CampaignInfo) -> None:
        """The campaign's first request from this pod is about to start: if it is the fleet's
        first, the time since the campaign was due goes to ``herald_first_request_seconds``.
        Written in the background: the request does not wait for a metric."""
        if info.first_request_noted:
            return
        info.first_request_noted = True
        task = asyncio.create_task(self._mark_first_request(campaign_id, info, utcnow()))
        self._noting.add(task)
        task.add_done_callback(self._noting.discard)

    async def _mark_first_request(self, campaign_id: str, info: CampaignInfo,
                                  now: datetime) -> None:
        try:
            if await self._campaigns.mark_first_request(campaign_id, now) and info.due_since:
                FIRST_REQUEST_SECONDS.labels(info.lane.value).observe(
                    max(0.0, (now - info.due_since).total_seconds()))
        except Exception:  # a metric: never the send's business
            log.warning("noting the first request of %s failed", campaign_id, exc_info=True)

    async def verdict(self, campaign_id: str) -> Verdict:
        """May the campaign send now (its rate and wave read again first when old)?"""
        await self.refresh(campaign_id)
        return await self._view.verdict(campaign_id)

    async def verdict_from_store(self, campaign_id: str) -> Verdict:
        """The same, read from the store now, not from memory."""
        return await self._view.read(campaign_id)

    def event(self, campaign_id: str) -> asyncio.Event:
        """Set while the campaign may not send here (checked before every request)."""
        return self._view.event(campaign_id)

    def known(self, campaign_id: str) -> Verdict | None:
        return self._view.known(campaign_id)

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
            self._view.learn(campaign)
