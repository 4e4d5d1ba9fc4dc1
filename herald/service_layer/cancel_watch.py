"""What this pod knows to be cancelled or paused: checked before every FCM request and every page.

The broadcast marks a campaign here in memory; a campaign cancelled while this pod was away (or
whose broadcast it missed) is found through its Redis flag, re-read at most once a second per
campaign by the sender. Each campaign has an ``asyncio.Event``, so a sender waiting out a backoff
wakes the moment its campaign is cancelled.

A pause sets the same event (every request, retry and backoff stops the same way), and is
remembered apart: a resume clears the event again unless the campaign was cancelled meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from herald.service_layer.ports import CancelFlags


class CancelWatch:
    def __init__(self, flags: CancelFlags) -> None:
        self._flags = flags
        self._events: dict[str, asyncio.Event] = {}
        self._heard: set[str] = set()
        self._stopped: set[str] = set()
        self._paused: set[str] = set()
        self._learned: Callable[[str], None] = lambda _campaign_id: None

    def on_learned(self, callback: Callable[[str], None]) -> None:
        """Call ``callback`` with each campaign this pod learns of through its flag."""
        self._learned = callback

    def event(self, campaign_id: str) -> asyncio.Event:
        """Set while ``campaign_id`` must not send here: cancelled, stopped or paused."""
        return self._events.setdefault(campaign_id, asyncio.Event())

    def mark(self, campaign_id: str) -> bool:
        """Remember a cancel; True the first time this pod hears of it."""
        self.event(campaign_id).set()
        fresh = campaign_id not in self._heard
        self._heard.add(campaign_id)
        return fresh

    def stop_here(self, campaign_id: str) -> None:
        """Stop sending ``campaign_id`` in this pod now, before any cancel is decided (FCM
        refused it); the cancel, once decided, is still heard (``mark``) and acknowledged."""
        self._stopped.add(campaign_id)
        self.event(campaign_id).set()

    def knows(self, campaign_id: str) -> bool:
        """Known cancelled (or stopped) here (memory only; no I/O)."""
        return campaign_id in self._heard or campaign_id in self._stopped

    def pause(self, campaign_id: str) -> bool:
        """Hold ``campaign_id`` here now; True if it was not held already."""
        fresh = campaign_id not in self._paused
        self._paused.add(campaign_id)
        self.event(campaign_id).set()
        return fresh

    def resume(self, campaign_id: str) -> None:
        """The campaign sends again (read from its status): the event is cleared unless it
        was cancelled meanwhile."""
        self._paused.discard(campaign_id)
        if not self.knows(campaign_id) and campaign_id in self._events:
            self._events[campaign_id].clear()

    def is_paused(self, campaign_id: str) -> bool:
        """Held here by a pause (memory only; no I/O)."""
        return campaign_id in self._paused and not self.knows(campaign_id)

    async def is_cancelled(self, campaign_id: str) -> bool:
        """Known here, or flagged in Redis (then remembered, and the pod told)."""
        if self.knows(campaign_id):
            return True
        if await self._flags.is_raised(campaign_id):
            self.learn(campaign_id)
            return True
        return False

    def learn(self, campaign_id: str) -> None:
        """A cancel found outside the broadcast (a flag, a campaign's status)."""
        if self.mark(campaign_id):
            self._learned(campaign_id)
