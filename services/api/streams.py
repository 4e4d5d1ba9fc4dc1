"""An open event stream's hold on its place: at most ``HERALD_API_STREAMS_PER_KEY`` streams per
key across every api replica (``StreamSlots`` in Redis), and none outliving its key: the key is
read again every ``KEY_RECHECK_S`` and the stream ends once it is revoked or expired."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio

from herald.adapters.redis import StreamSlots
from herald.clock import utcnow
from herald.domain.access import ApiKey
from herald.service_layer.campaign_events import Event, KeepGoing
from herald.service_layer.ports import ApiKeyRepository

KEY_RECHECK_S = 1.0
"""How often a stream reads its key again: it ends within this (plus one poll) of a revocation,
well inside the 5 s the access issue asks for."""
REFRESH_S = 10.0
"""How often a stream tells Redis it is alive (a dead replica's streams are forgotten after
``STREAM_STALE_S``)."""
RELEASE_TIMEOUT_S = 2.0


class StreamLease:
    def __init__(self, slots: StreamSlots, api_keys: ApiKeyRepository, key: ApiKey,
                 stream_id: str) -> None:
        self._slots = slots
        self._api_keys = api_keys
        self._key = key
        self._stream_id = stream_id
        self._checked = self._refreshed = time.monotonic()

    @classmethod
    async def take(cls, slots: StreamSlots, api_keys: ApiKeyRepository,
                   key: ApiKey) -> StreamLease | None:
        """A place for one more stream of ``key``, or None: it holds as many as allowed."""
        stream_id = await slots.take(key.id)
        return None if stream_id is None else cls(slots, api_keys, key, stream_id)

    async def holds(self) -> bool:
        """Whether the stream may go on: its key is still usable (read again every
        ``KEY_RECHECK_S``); its place is refreshed on the way."""
        now = time.monotonic()
        if now - self._refreshed >= REFRESH_S:
            self._refreshed = now
            await self._slots.refresh(self._key.id, self._stream_id)
        if now - self._checked < KEY_RECHECK_S:
            return True
        self._checked = now
        current = await self._api_keys.get(self._key.id)
        return current is not None and current.usable_at(utcnow())

    async def release(self) -> None:
        """Give the place back; shielded, as it runs while the stream is being cancelled (the
        client went away)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT_S):
            await self._slots.release(self._key.id, self._stream_id)


@dataclass(frozen=True)
class WatchCampaign:
    """The use case of ``GET /v1/campaigns/{id}/events``: a campaign's live events, within the
    streams its watcher's key may hold open."""

    campaign_events: Callable[..., Awaitable[AsyncIterator[Event]]]
    slots: StreamSlots
    api_keys: ApiKeyRepository
    streams_per_key: int

    async def lease(self, key: ApiKey) -> StreamLease | None:
        return await StreamLease.take(self.slots, self.api_keys, key)

    async def events(self, campaign_id: str, keep_going: KeepGoing) -> AsyncIterator[Event]:
        return await self.campaign_events(campaign_id, keep_going=keep_going)
