"""Which campaigns this pod is sending or paging right now, and a way to wait until it stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator


class WorkTracker:
    def __init__(self) -> None:
        self._active: Counter[str] = Counter()
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def working_on(self, campaign_id: str) -> AsyncIterator[None]:
        self._active[campaign_id] += 1
        try:
            yield
        finally:
            self._active[campaign_id] -= 1
            if self._active[campaign_id] <= 0:
                del self._active[campaign_id]
            async with self._changed:
                self._changed.notify_all()

    def campaigns(self) -> list[str]:
        return sorted(self._active)

    async def wait_idle(self, campaign_id: str, timeout_s: float) -> bool:
        """Wait until no work on ``campaign_id`` is in flight here; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: campaign_id not in self._active), timeout_s)
            except TimeoutError:
                return False
        return True
