"""What this pod knows to be cancelled: checked before every FCM request and every page.

The broadcast marks a campaign here in memory; a campaign cancelled while this pod was away (or
whose broadcast it missed) is found through its Redis flag, re-read at most once a second per
campaign by the sender. Each campaign has an ``asyncio.Event``, so a sender waiting out a backoff
wakes the moment its campaign is cancelled.
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
        self._learned: Callable[[str], None] = lambda _campaign_id: None

    def on_learned(self, callback: Callable[[str], None]) -> None:
        """Call ``callback`` with each campaign this pod learns of through its flag."""
        self._learned = callback

    def event(self, campaign_id: str) -> asyncio.Event:
        """Set once ``campaign_id`` is known cancelled here."""
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
        self.event(campaign_id).set()

    def knows(self, campaign_id: str) -> bool:
        """Known cancelled here (memory only; no I/O)."""
        event = self._events.get(campaign_id)
        return event is not None and event.is_set()

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
