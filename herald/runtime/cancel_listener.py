"""A pod's ear on ``herald.cancel``: every message, in one place.

A message that names a decision (``decision_id``: Herald decided it) is told to the pod's view
(``stopping/verdict.py``), which acts only on the campaign's latest decision as stored, so a late
or repeated broadcast changes nothing; the view passes a stopping decision to the acknowledge
path. A message without one was published by an outside AMQP tool: it is a request, decided once
however many pods hear it (the first pod to see it, by a Redis claim on the message, asks the
decider, which decides and broadcasts it as any decision), and that pod writes the operator log.

The actor of a message published by an outside tool is its AMQP ``user_id`` property, which
RabbitMQ checks against the publishing connection's user; without one, the message's own
``requested_by``, recorded as unverified.
"""

from __future__ import annotations

import logging

from faststream.rabbit.annotations import RabbitMessage

from herald import names
from herald.adapters import rabbit
from herald.domain.access import Actor, amqp_actor
from herald.domain.documents import DecisionKind
from herald.domain.messages import CANCEL_MESSAGE_MAX_BYTES, CancelCampaign
from herald.domain.status import CancelDecision, PauseDecision, Status
from herald.observability import CANCEL_UNMATCHED
from herald.service_layer.access import OperatorLog
from herald.service_layer.stopping import (
    CampaignNotFound,
    CannotCancel,
    CannotPause,
    CannotResume,
    Decider,
    PodView,
)

log = logging.getLogger(__name__)

_KINDS = {"cancel": DecisionKind.CANCEL, "pause": DecisionKind.PAUSE,
          "resume": DecisionKind.RESUME}


class CancelListener:
    def __init__(self, view: PodView, decider: Decider, operator_log: OperatorLog, *,
                 first_copy: rabbit.FirstCopy, first_request: rabbit.FirstCopy) -> None:
        self._view = view
        self._decider = decider
        self._operator_log = operator_log
        self._first_copy = first_copy
        self._first_request = first_request

    async def on_message(self, message: RabbitMessage) -> None:
        raw = message.raw_message
        user_id = raw.user_id
        if len(message.body) > CANCEL_MESSAGE_MAX_BYTES:
            await self._drop_oversized(message, user_id)
            return

        async def apply(command: CancelCampaign) -> None:
            seen = f"{raw.message_id or ''}|{user_id or ''}|".encode() + message.body
            await self.handle(command, amqp_actor(user_id, command.requested_by), seen)

        # Every pod's queue receives every broadcast, so a malformed message arrives once per
        # pod: the first pod to claim its digest in Redis dead-letters it and logs it, the others
        # drop their copies.
        await rabbit.execute(message, CancelCampaign, apply, first_copy=self._first_copy)

    async def _drop_oversized(self, message: RabbitMessage, user_id: str | None) -> None:
        """Too large to be a cancel: dropped, never kept or parsed; one line from the first pod
        that sees it (every pod gets a copy)."""
        try:
            first = await self._first_copy(message.body)
        except Exception:  # Redis away: a line per pod beats none
            first = True
        if first:
            log.warning("message of %d bytes on %s dropped (a cancel is at most %d), "
                        "published by %s", len(message.body), names.CANCEL_EXCHANGE,
                        CANCEL_MESSAGE_MAX_BYTES, user_id or "an unnamed user")
        await message.ack()

    async def handle(self, command: CancelCampaign, actor: Actor, seen: bytes) -> None:
        """One message of ``herald.cancel``: a decision told, or a request to decide."""
        if command.decision_id is not None:
            await self._view.hear(command.campaign_id, _KINDS[command.action],
                                  command.decision_id, command.replaces)
        elif await self._first_to_see(seen):
            await self._decide(command, actor)

    async def _first_to_see(self, seen: bytes) -> bool:
        try:
            return await self._first_request(seen)
        except Exception:  # Redis away: every pod asks; the decider's guarded write decides once
            log.warning("could not tell whether another pod took this request first",
                        exc_info=True)
            return True

    async def _decide(self, command: CancelCampaign, actor: Actor) -> None:
        """A request from an outside tool, decided as the API decides."""
        try:
            decided = await self._decider.request(command, actor)
        except (CampaignNotFound, CannotCancel, CannotPause, CannotResume) as exc:
            CANCEL_UNMATCHED.inc()
            log.warning("%s message for %s matches no campaign it applies to: %s",
                        command.action, command.campaign_id, exc)
            return
        if decided.meaning in (CancelDecision.ALREADY, PauseDecision.ALREADY):
            return
        await self._operator_log.record(
            actor=actor, action=f"campaign.{command.action}",
            status_code=200 if decided.status is Status.CANCELLED else 202,
            target_kind="campaign", target_id=command.campaign_id,
            campaign_id=command.campaign_id,
            detail=f"via {names.CANCEL_EXCHANGE}: {command.reason or 'no reason given'}")
