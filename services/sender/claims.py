"""Holding a chunk while sending it: one sender at a time, and one delivery of it per sender.

Two copies of one chunk message can exist (a dispatcher that died between publishing and
checkpointing republishes it; a chunk handed back is published again). Whichever copy finds the
chunk held by a live sender waits; a chunk whose holder died is taken over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from enum import Enum

from herald.adapters.chunks import ChunkStatus, chunk_id
from herald.adapters.mongo import Document
from herald.clock import utcnow
from herald.runtime import Pod


class NotTaken(Enum):
    CLOSED = "closed"  # sent (or closed) already: nothing to do
    BUSY = "busy"  # another live holder, or another delivery in this process, is on it


class ChunkClaims:
    def __init__(self, pod: Pod, hold_s: float) -> None:
        self._pod = pod
        self._hold = timedelta(seconds=hold_s)
        self._in_hand: set[str] = set()

    @contextlib.contextmanager
    def first_here(self, campaign_id: str, seq: int) -> Iterator[bool]:
        """Whether this delivery is the only one of its chunk being handled in this process."""
        key = chunk_id(campaign_id, seq)
        if key in self._in_hand:
            yield False
            return
        self._in_hand.add(key)
        try:
            yield True
        finally:
            self._in_hand.discard(key)

    async def take(self, campaign_id: str, seq: int) -> Document | NotTaken:
        """Hold the chunk for this pod: its state before (counting one more attempt), or why not."""
        chunks, now = self._pod.stores.chunks, utcnow()
        state = await chunks.state(campaign_id, seq)
        if state is None or state["status"] != ChunkStatus.PENDING.value:
            return NotTaken.CLOSED
        holder = state.get("owner")
        if holder not in (None, self._pod.id) and state["owner_until"] > now and (
                await self._pod.pods.is_alive(holder)):
            return NotTaken.BUSY
        before = await chunks.claim(campaign_id, seq, self._pod.id, holder, now + self._hold)
        return NotTaken.BUSY if before is None else before

    async def release(self, campaign_id: str, seq: int, *, refund: bool) -> None:
        """Give the chunk back, as far as MongoDB lets us (a hold also expires by itself)."""
        with contextlib.suppress(Exception):
            await self._pod.stores.chunks.release(campaign_id, seq, self._pod.id, refund=refund)
