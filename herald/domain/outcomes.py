"""What happened to one recipient when a sender asked FCM: the one outcome type that goes from
the sender's window to the store (and into the audit).

A recipient is known by its position in its chunk (a chunk's recipients never change once
written), so the store keeps positions, not tokens; the token rides along for what the sender
does next (retiring a dead token).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from herald.domain.fcm_errors import FcmError, token_is_dead
from herald.domain.payload import WireBody


@dataclass(frozen=True, slots=True)
class Target:
    """A recipient to send to, known by its position in the chunk; ``body`` is its own FCM
    request when the campaign's messages differ per device (None: the shared one), its expiry
    filled when the request starts."""

    position: int
    token: str
    body: WireBody | None = None


@dataclass(frozen=True, slots=True)
class RecipientOutcome:
    """FCM's answer for one recipient: ``error`` None means FCM accepted the message; else an
    :class:`FcmError` (a ``str``), or a code of Herald's own (``HERALD_DEAD_LETTERED``)."""

    target: Target
    error: FcmError | str | None

    @property
    def position(self) -> int:
        return self.target.position

    @property
    def token(self) -> str:
        return self.target.token

    @property
    def code(self) -> str | None:
        """The error as stored (None: sent)."""
        return None if self.error is None else str(self.error)

    @property
    def sent(self) -> bool:
        return self.error is None


def outcome_at(position: int, code: str | None, token: str = "") -> RecipientOutcome:
    """An outcome known by its position and stored code (a dead-lettered chunk's rest)."""
    return RecipientOutcome(Target(position, token), code)


def dead_tokens(outcomes: Iterable[RecipientOutcome]) -> list[tuple[str, str]]:
    """``(token, error)`` of the outcomes whose error means the token is dead."""
    return [(o.token, code) for o in outcomes
            if (code := o.code) is not None and token_is_dead(code)]
