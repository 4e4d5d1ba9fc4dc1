"""Background loops that live as long as the process: started, guarded, and cancelled at stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

log = logging.getLogger(__name__)

RECANCEL_S = 0.5


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Awaitable[None], name: str) -> None:
        """Run ``coroutine`` in the background; a crash is logged, never silent."""
        async def guarded() -> None:
            try:
                await coroutine
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task %s crashed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self, timeout_s: float = 10.0) -> None:
        """Cancel every task and wait for them to end. A cancellation can be swallowed by a
        library caught mid-handshake (the task then runs on), so the tasks still running are
        cancelled again every ``RECANCEL_S`` until they end or ``timeout_s`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._tasks:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.wait(list(self._tasks), timeout=RECANCEL_S)
            if self._tasks and loop.time() > deadline:
                log.warning("background tasks still running after %.0fs: %s", timeout_s,
                            sorted(task.get_name() for task in self._tasks))
                return
