"""What the window's unit tests share: a message, targets, a recorder of written groups, and a
deadline-bound wait (``test_send_window.py``, ``test_lanes.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from herald.domain.fcm_errors import FcmError
from herald.domain.outcomes import RecipientOutcome as Outcome
from herald.domain.outcomes import Target
from herald.domain.payload import MessageTemplate, build_payload

TEMPLATE = MessageTemplate(build_payload("title", "body", {}, None, replace_key="window-test"))


def targets(prefix: str, count: int) -> list[Target]:
    return [Target(position, f"{prefix}-{position}") for position in range(count)]


class Records:
    """The groups written, per delivery; a write can be held or made to fail."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.errors: dict[str, FcmError | None] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def write(self, outcomes: list[Outcome]) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionError("MongoDB went away")
        self.groups.append([o.target.token for o in outcomes])
        self.errors.update((o.target.token, o.error) for o in outcomes)

    @property
    def written(self) -> list[str]:
        return [token for group in self.groups for token in group]


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Let the window run until ``condition`` holds (a deadline, never a bare sleep)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def always() -> bool:
    return True
