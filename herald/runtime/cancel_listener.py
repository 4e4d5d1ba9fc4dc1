"""A pod's part in the cancel and pause protocols: it hears the broadcast on its own queue, stops
its local work at once and, for senders and dispatchers, acknowledges once idle (a pause the same
way as a cancel; a resume only makes the pod read the campaign's status again). It does not
finish cancels (``Cancellation.finish`` does, on the last acknowledgement). It asks for the
decision without broadcasting: a cancel the api decided is seen decided (nothing is written),
and a cancel published by any AMQP tool is decided by the first pod that asks, so it does what
the API call does.

The actor of a cancel published by an outside tool is its AMQP ``user_id`` property, which
RabbitMQ checks against the publishing connection's user; without one, the message's own
``requested_by``, recorded as unverified. The pod that makes such a cancel take effect writes it
to the operator log.
"""

from __future__ import annotations

import logging
import time

from faststream.rabbit.annotations import RabbitMessage

from herald import names
from herald.adapters import rabbit
from herald.domain.access import Actor, amqp_actor
from herald.domain.messages import CancelCampaign
from herald.domain.status import CancelDecision, PauseDecision, Status
from herald.observability import CANCEL_UNMATCHED
from herald.runtime.tasks import Background
from herald.runtime.tracking import WorkTracker
from herald.service_layer.access import OperatorLog
from herald.service_layer.cancel_watch import CancelWatch
from herald.service_layer.cancellation import CampaignNotFound, Cancellation, CannotCancel
from herald.service_layer.pausing import CannotPause, Pausing

log = logging.getLogger(__name__)


class CancelListener:
    def __init__(self, watch: CancelWatch, cancellation: Cancellation, pausing: Pausing,
                 tracker: WorkTracker, background: Background, operator_log: OperatorLog, *,
                 pod_id: str, acknowledges: bool, grace_s: float,
                 first_copy: rabbit.FirstCopy) -> None:
        self._watch = watch
        self._pausing = pausing
        self._pauses_acknowledged: set[str] = set()
        self._first_copy = first_copy
        self._operator_log = operator_log
        self._cancellation = cancellation
        self._tracker = tracker
        self._background = background
        self._pod_id = pod_id
        self._acknowledges = acknowledges
        self._grace_s = grace_s
        watch.on_learned(self._learned)

    async def on_message(self, message: RabbitMessage) -> None:
        user_id = message.raw_message.user_id

        async def apply(command: CancelCampaign) -> None:
            await self.handle(command, amqp_actor(user_id, command.requested_by))

        # Every pod's queue receives every broadcast, so a malformed cancel arrives once per
        # pod: the first pod to claim its digest in Redis dead-letters it and logs it, the others
        # drop their copies (a shared inspection queue bound to herald.cancel would also give one
        # copy, but every good cancel would then wait there for someone to take it away).
        await rabbit.execute(message, CancelCampaign, apply, first_copy=self._first_copy)

    async def handle(self, command: CancelCampaign, actor: Actor) -> None:
        """One message of ``herald.cancel``, by its ``action``."""
        if command.action == "pause":
            await self.apply_pause(command, actor)
        elif command.action == "resume":
            await self._pausing_read_again(command.campaign_id)
        else:
            await self.apply(command, actor)

    async def apply(self, command: CancelCampaign, actor: Actor) -> None:
        """Stop here at once, see the cancel decided (deciding it if nobody did), then
        acknowledge it once idle."""
        acknowledge = self._watch.mark(command.campaign_id) and self._acknowledges
        try:
            outcome = await self._cancellation.request(
                command.campaign_id, command.reason, actor, broadcast=False)
        except (CampaignNotFound, CannotCancel) as exc:
            CANCEL_UNMATCHED.inc()
            log.warning("cancel message for %s matches no cancellable campaign: %s",
                        command.campaign_id, exc)
            return
        if outcome.decision is not CancelDecision.ALREADY:  # this pod decided it
            await self._log(command, actor, outcome.status)
        if outcome.status is Status.CANCELLING and acknowledge:
            # in the background: the next cancel message must not wait for this one
            self._acknowledge_soon(command.campaign_id)

    async def apply_pause(self, command: CancelCampaign, actor: Actor) -> None:
        """Hold the campaign here at once, see the pause decided (deciding it if nobody did),
        then acknowledge it once idle."""
        self._watch.pause(command.campaign_id)
        try:
            outcome = await self._pausing.request(command.campaign_id, command.reason, actor,
                                                  broadcast=False)
        except (CampaignNotFound, CannotPause) as exc:
            self._watch.resume(command.campaign_id)
            CANCEL_UNMATCHED.inc()
            log.warning("pause message for %s matches no campaign that sends: %s",
                        command.campaign_id, exc)
            return
        if outcome.decision is not PauseDecision.ALREADY:  # this pod decided it
            await self._operator_log.record(
                actor=actor, action="campaign.pause", status_code=202, target_kind="campaign",
                target_id=command.campaign_id, campaign_id=command.campaign_id,
                detail=f"via {names.CANCEL_EXCHANGE}: {command.reason or 'no reason given'}")
        pause = outcome.campaign.pause
        if (self._acknowledges and pause is not None and pause.settled_at is None
                and pause.pause_id not in self._pauses_acknowledged):
            # Once per pause, even if this pod found the campaign paused in its status first.
            self._pauses_acknowledged.add(pause.pause_id)
            self._background.spawn(self._acknowledge_pause(command.campaign_id, pause.pause_id),
                                   f"ack-pause-{command.campaign_id}")

    async def _pausing_read_again(self, campaign_id: str) -> None:
        """A resume (told by the api): the campaign's status says whether to send again."""
        campaign = await self._pausing.campaign(campaign_id)
        if campaign is not None and campaign.status is not Status.PAUSED:
            self._watch.resume(campaign_id)

    async def _acknowledge_pause(self, campaign_id: str, pause_id: str) -> None:
        if not await self._tracker.wait_idle(campaign_id, self._grace_s):
            log.warning("pause of %s: still busy after %.0fs; not acknowledging", campaign_id,
                        self._grace_s)
            return
        await self._pausing.acknowledge(campaign_id, pause_id, self._pod_id)

    async def _log(self, command: CancelCampaign, actor: Actor, status: Status) -> None:
        """The operator log's entry, with the code the API answers for the same cancel (200
        cancelled at once, 202 cancelling)."""
        await self._operator_log.record(
            actor=actor, action="campaign.cancel",
            status_code=200 if status is Status.CANCELLED else 202, target_kind="campaign",
            target_id=command.campaign_id, campaign_id=command.campaign_id,
            detail=f"via {names.CANCEL_EXCHANGE}: {command.reason or 'no reason given'}")

    def _learned(self, campaign_id: str) -> None:
        """A cancel found outside the broadcast: acknowledge it once idle."""
        if self._acknowledges:
            self._acknowledge_soon(campaign_id)

    def _acknowledge_soon(self, campaign_id: str) -> None:
        self._background.spawn(self._acknowledge_when_idle(campaign_id), f"ack-{campaign_id}")

    async def _acknowledge_when_idle(self, campaign_id: str) -> None:
        started = time.monotonic()
        if not await self._tracker.wait_idle(campaign_id, self._grace_s):
            # Still sending after the grace: acknowledging now would let the campaign be
            # counted before this pod's last batch is recorded. Its heartbeat speaks for it.
            log.warning("cancel of %s: still busy after %.0fs; not acknowledging", campaign_id,
                        self._grace_s)
            return
        idle = time.monotonic()
        await self._cancellation.acknowledge(campaign_id, self._pod_id)
        log.info("cancel of %s: idle after %.0f ms, acknowledged after %.0f ms", campaign_id,
                 1000 * (idle - started), 1000 * (time.monotonic() - started))
