"""A sender's answer to FCM refusing a whole campaign rather than one recipient.

A payload, permission, credentials or project error (``herald/domain/fcm_errors.py``) would be
answered to every recipient alike. The first such answer stops the campaign in this pod at once
(its cancel event: nothing more of it starts here, so at most the requests already on the wire
follow), logs one ERROR line with Google's message, and asks the fleet to stop it too
(``Decider.stop_for_error``: the campaign ends ``failed`` with that reason). No token is
retired for it.

``SENDER_ID_MISMATCH`` is a recipient's answer (its token belongs to another project), unless
nearly every token gets it: then the credentials are of another project. This pod counts, per
campaign, the answers that tell a token's project (accepted or mismatched) and asks the rule of
``herald.domain.fcm_errors`` after every group it records: a confident bound of the mismatch
share above 0.9 (``wrong_project``) stops the campaign like any other configuration error and
retires nothing; one below it (``may_retire_mismatched``) releases the mismatched tokens held so
far, and those of later groups, to be excluded from later audiences. A project migration that
leaves 30% or 70% of old tokens so never stops a campaign, however small its waves or groups. In
between, the tokens are held, at most ``HELD_AT_MOST`` of them (the rest are recorded failed
like the others, and a retry skips them, but this campaign does not retire them).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from herald.domain.fcm_errors import (
    FcmError,
    may_retire_mismatched,
    tells_project,
    wrong_project,
)
from herald.domain.outcomes import RecipientOutcome
from herald.observability import CAMPAIGNS_STOPPED
from herald.service_layer.stopping import PodView

log = logging.getLogger(__name__)

REMEMBERED = 1000
"""Campaigns whose answers a pod keeps count of (the oldest are forgotten)."""
HELD_AT_MOST = 10_000
"""Mismatched tokens a pod holds per campaign while the answers cannot tell a wrong project."""

StopForError = Callable[[str, str], Awaitable[object]]
"""Stop a campaign fleet-wide with a reason (``Decider.stop_for_error``)."""
Spawn = Callable[[Awaitable[None], str], None]


def reason_for(code: FcmError, message: str | None) -> str:
    """The reason a stopped campaign shows, with Google's own words."""
    return f"FCM refused the campaign: {code.value}: {message or 'no message'}"


@dataclass
class _Answers:
    answered: int = 0
    """Answers that tell a token's project: accepted, or ``SENDER_ID_MISMATCH``."""
    mismatched: int = 0
    held: list[str] = field(default_factory=list)
    """Mismatched tokens not retired yet: the answers cannot tell a wrong project yet."""
    stopped: bool = False
    wrong_project: bool = False


class CampaignRefusals:
    """This pod's view of the FCM answers to each campaign it sends."""

    def __init__(self, view: PodView, stop_for_error: StopForError, spawn: Spawn) -> None:
        self._view = view
        self._stop_for_error = stop_for_error
        self._spawn = spawn
        self._campaigns: OrderedDict[str, _Answers] = OrderedDict()

    def stop(self, campaign_id: str, code: FcmError, message: str | None) -> None:
        """FCM refused the campaign: stop it here now, and everywhere (once per pod)."""
        answers = self._answers(campaign_id)
        if answers.stopped:
            return
        answers.stopped = True
        self._view.stop_here(campaign_id)
        reason = reason_for(code, message)
        CAMPAIGNS_STOPPED.labels(code.value).inc()
        log.info("campaign %s: no more requests from this pod: %s", campaign_id, reason)
        self._spawn(self._stop_everywhere(campaign_id, reason), f"stop-{campaign_id}")

    def mismatched_to_retire(self, campaign_id: str, outcomes: Iterable[RecipientOutcome]
                             ) -> list[str]:
        """Count a group of answers; the mismatched tokens that may now be excluded from later
        audiences. Stops the campaign if nearly every token is mismatched."""
        answers = self._answers(campaign_id)
        if answers.wrong_project:
            return []
        for outcome in outcomes:
            if not tells_project(outcome.error):
                continue
            answers.answered += 1
            if outcome.error == FcmError.SENDER_ID_MISMATCH:
                answers.mismatched += 1
                if len(answers.held) < HELD_AT_MOST:
                    answers.held.append(outcome.token)
        if wrong_project(answers.mismatched, answers.answered):
            answers.held.clear()
            answers.wrong_project = True
            self.stop(campaign_id, FcmError.SENDER_ID_MISMATCH,
                      f"{answers.mismatched} of {answers.answered} tokens belong to another "
                      "Firebase project: the credentials or HERALD_FCM_PROJECT_ID are likely "
                      "of the wrong project")
            return []
        if not may_retire_mismatched(answers.mismatched, answers.answered):
            return []
        released, answers.held = answers.held, []
        return released

    async def _stop_everywhere(self, campaign_id: str, reason: str) -> None:
        """Decide the stop (a cancel Herald makes), then take part in it like any pod: this
        one acknowledges once its requests on the wire are answered and recorded."""
        try:
            decided = await self._stop_for_error(campaign_id, reason)
        except Exception:  # this pod stopped already; the others stop on their own first
            log.warning("stopping campaign %s everywhere failed; the other pods stop on their "
                        "own first refused request", campaign_id, exc_info=True)
        else:
            if decided is not None:  # the one ERROR line of the fleet: the pod that decided
                log.error("campaign %s stopped: %s", campaign_id, reason)
            await self._view.read(campaign_id)  # the decision, to acknowledge it

    def _answers(self, campaign_id: str) -> _Answers:
        answers = self._campaigns.get(campaign_id)
        if answers is None:
            answers = self._campaigns[campaign_id] = _Answers()
            if len(self._campaigns) > REMEMBERED:
                self._campaigns.popitem(last=False)
        else:
            self._campaigns.move_to_end(campaign_id)
        return answers
