"""What route handlers get from the composition root, through FastAPI's dependency injection."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from herald.runtime import Pod
from herald.service_layer.campaigns import CampaignCreator

log = logging.getLogger(__name__)


@dataclass
class AppServices:
    pod: Pod
    creator: CampaignCreator
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def finalize_cancel_soon(self, campaign_id: str) -> None:
        """Finish a cancel nobody has to acknowledge (no sender alive) without waiting for a sweep."""
        task = asyncio.create_task(self._finalize(campaign_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finalize(self, campaign_id: str) -> None:
        try:
            await self.pod.cancellation.try_finalize(campaign_id)
        except Exception:
            log.warning("finalizing cancel of %s failed; the sweep retries", campaign_id,
                        exc_info=True)


def _services(request: Request) -> AppServices:
    services: AppServices = request.app.state.services
    return services


Services = Annotated[AppServices, Depends(_services)]
