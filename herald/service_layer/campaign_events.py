"""A campaign's live state as a stream of events: what the server-sent events endpoint sends.

The first event is the state at once; later ones only when something a watcher sees changed
(status, counts, the cancel record, the finish, an edit, an approval); a keep-alive marks a
long quiet stretch; the stream ends with the event that carries a final status. Change detection is pure
(``ChangeDetector``); ``campaign_events`` polls the store, one ``get`` per tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from herald.domain.documents import Campaign, PauseRecord
from herald.domain.rollout import GateFigures
from herald.domain.status import TERMINAL, Status
from herald.service_layer.ports import CampaignLookup
from herald.service_layer.queries import campaign as find_campaign

POLL_S = 0.25
KEEPALIVE_S = 15.0

Fingerprint = tuple[Status, int, int, int, int, datetime | None, datetime | None, datetime | None,
                    int, int, int, PauseRecord | None,
                    tuple[int, datetime | None, GateFigures] | None, int | None]


@dataclass(frozen=True)
class CampaignChanged:
    """The campaign as it is now; ``seq`` numbers the events of one stream from 1."""

    seq: int
    campaign: Campaign

    @property
    def final(self) -> bool:
        return self.campaign.status in TERMINAL


@dataclass(frozen=True)
class KeepAlive:
    """Nothing changed for a while: a comment line keeps proxies from closing the stream."""


Event = CampaignChanged | KeepAlive


def fingerprint(campaign: Campaign) -> Fingerprint:
    """What a watcher of a campaign sees change."""
    counts, cancel = campaign.counts, campaign.cancel
    rollout = campaign.rollout_progress
    return (campaign.status, counts.targeted, counts.sent, counts.failed, counts.suppressed,
            cancel.requested_at if cancel else None, cancel.acknowledged_at if cancel else None,
            campaign.finished_at, len(campaign.amended_by), campaign.revision,
            len(campaign.approvals), campaign.pause,
            (rollout.wave, rollout.hold_until, rollout.figures) if rollout else None,
            campaign.rate_per_s)


class ChangeDetector:
    """Turns successive readings of one campaign into events: a reading that changes nothing
    seen is no event, unless ``quiet_ticks`` readings in a row were quiet (a keep-alive)."""

    def __init__(self, quiet_ticks: int) -> None:
        self._quiet_ticks = max(1, quiet_ticks)
        self._last: Fingerprint | None = None
        self._seq = 0
        self._quiet = 0

    def observe(self, campaign: Campaign) -> Event | None:
        seen = fingerprint(campaign)
        if seen != self._last:
            self._last, self._quiet = seen, 0
            self._seq += 1
            return CampaignChanged(self._seq, campaign)
        self._quiet += 1
        if self._quiet >= self._quiet_ticks:
            self._quiet = 0
            return KeepAlive()
        return None


Sleep = Callable[[float], Awaitable[None]]
KeepGoing = Callable[[], Awaitable[bool]]


async def _always() -> bool:
    return True


async def campaign_events(campaigns: CampaignLookup, campaign_id: str, *, poll_s: float = POLL_S,
                          keepalive_s: float = KEEPALIVE_S, sleep: Sleep = asyncio.sleep,
                          keep_going: KeepGoing = _always) -> AsyncIterator[Event]:
    """The events of one campaign until its final status, or until ``keep_going`` (asked at
    every tick) says no: the watcher's key was revoked, say. Raises ``CampaignNotFound`` at once
    for an unknown id (before any event, so a caller can answer 404)."""
    first = await find_campaign(campaigns, campaign_id)
    return _events(campaigns, first, ChangeDetector(round(keepalive_s / poll_s)), poll_s, sleep,
                   keep_going)


async def _events(campaigns: CampaignLookup, first: Campaign, detector: ChangeDetector, poll_s: float,
                  sleep: Sleep, keep_going: KeepGoing) -> AsyncIterator[Event]:
    reading: Campaign | None = first
    while reading is not None:
        event = detector.observe(reading)
        if event is not None:
            yield event
            if isinstance(event, CampaignChanged) and event.final:
                return
        await sleep(poll_s)
        if not await keep_going():
            return
        reading = await campaigns.get(first.id)
