"""Campaign lifecycle: the statuses and the one table of transitions between them.

Every status change in Herald is a conditional update "set status to T where status is one of S";
``sources_for`` gives S for a transition, so a finishing sender can never overwrite ``cancelling``
with ``completed`` and a cancel can never resurrect a finished campaign.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    SCHEDULED = "scheduled"
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    MISSED = "missed"
    PAUSED = "paused"


class Transition(StrEnum):
    """Named status changes; each is allowed only from the sources listed in ``TRANSITIONS``."""

    FIRE = "fire"  # a scheduled campaign is due
    CLAIM = "claim"  # a dispatcher starts paging the audience
    FINALIZE = "finalize"  # every chunk is recorded
    COMPLETE = "complete"  # final counts are written
    FAIL = "fail"  # finished, but some recipients failed for reasons a retry could fix
    BEGIN_CANCEL = "begin_cancel"  # stop it: pods that may send acknowledge, then it is settled
    CONFIRM_CANCEL = "confirm_cancel"  # every pod has stopped
    CONFIRM_STOP = "confirm_stop"  # every pod has stopped a campaign FCM refused as misconfigured
    MISS = "miss"  # overdue beyond the misfire grace
    APPROVE = "approve"  # a second key approved a large campaign that is due: send it
    APPROVE_FOR_LATER = "approve_for_later"  # approved before its time: wait for it
    HOLD_FOR_APPROVAL = "hold_for_approval"  # what it sends changed (and needs approval)
    PAUSE = "pause"  # an operator or the rollout gate holds the rest back; pods stop and ack
    RESUME = "resume"  # the rest is offered again: exactly the recipients not sent yet


TRANSITIONS: dict[Transition, tuple[frozenset[Status], Status]] = {
    Transition.FIRE: (frozenset({Status.SCHEDULED}), Status.PENDING),
    Transition.CLAIM: (frozenset({Status.PENDING}), Status.IN_PROGRESS),
    Transition.FINALIZE: (frozenset({Status.IN_PROGRESS}), Status.FINALIZING),
    Transition.COMPLETE: (frozenset({Status.FINALIZING}), Status.COMPLETED),
    Transition.FAIL: (frozenset({Status.IN_PROGRESS, Status.FINALIZING}), Status.FAILED),
    Transition.BEGIN_CANCEL: (frozenset({Status.AWAITING_APPROVAL, Status.SCHEDULED,
                                         Status.PENDING, Status.IN_PROGRESS, Status.FINALIZING,
                                         Status.PAUSED}), Status.CANCELLING),
    Transition.CONFIRM_CANCEL: (frozenset({Status.CANCELLING}), Status.CANCELLED),
    Transition.CONFIRM_STOP: (frozenset({Status.CANCELLING}), Status.FAILED),
    Transition.MISS: (frozenset({Status.SCHEDULED}), Status.MISSED),
    Transition.APPROVE: (frozenset({Status.AWAITING_APPROVAL}), Status.PENDING),
    Transition.APPROVE_FOR_LATER: (frozenset({Status.AWAITING_APPROVAL}), Status.SCHEDULED),
    Transition.HOLD_FOR_APPROVAL: (frozenset({Status.SCHEDULED}), Status.AWAITING_APPROVAL),
    Transition.PAUSE: (frozenset({Status.IN_PROGRESS}), Status.PAUSED),
    Transition.RESUME: (frozenset({Status.PAUSED}), Status.IN_PROGRESS),
}

TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.MISSED})
ACTIVE = frozenset({Status.IN_PROGRESS, Status.FINALIZING})
"""Statuses in which pods may be sending."""

EDITABLE = frozenset({Status.AWAITING_APPROVAL, Status.SCHEDULED})
"""Statuses in which a campaign's content, audience and time may still change (nothing sent)."""

TESTABLE = frozenset({Status.AWAITING_APPROVAL, Status.SCHEDULED, Status.PENDING,
                      Status.IN_PROGRESS, Status.FINALIZING, Status.PAUSED})
"""Statuses in which a test send is allowed: any before the campaign is finished or stopping."""


class InvalidTransition(Exception):
    """A transition was asked for from a status that does not allow it."""

    def __init__(self, transition: Transition, current: Status) -> None:
        super().__init__(f"cannot {transition.value} a campaign that is {current.value}")
        self.transition = transition
        self.current = current


def sources_for(transition: Transition) -> frozenset[Status]:
    """Statuses from which ``transition`` may be applied."""
    return TRANSITIONS[transition][0]


def target_of(transition: Transition) -> Status:
    """Status a campaign has after ``transition``."""
    return TRANSITIONS[transition][1]


def apply(transition: Transition, current: Status) -> Status:
    """The status after ``transition`` from ``current``, or ``InvalidTransition``."""
    sources, target = TRANSITIONS[transition]
    if current not in sources:
        raise InvalidTransition(transition, current)
    return target


NOTHING_SENDING = frozenset({Status.AWAITING_APPROVAL, Status.SCHEDULED, Status.PENDING})
"""Statuses in which no pod can be sending the campaign: a cancel waits for nobody."""


class CancelDecision(StrEnum):
    """What a cancel request means for a campaign in a given status."""

    AT_ONCE = "at_once"  # awaiting_approval/scheduled/pending: nothing sent, settled at once
    STOP_PODS = "stop_pods"  # in_progress/finalizing/paused: broadcast, wait for pods to stop
    ALREADY = "already"  # cancelling/cancelled: idempotent, no second broadcast
    REFUSE = "refuse"  # completed/failed/missed: nothing left to stop


def decide_cancel(current: Status) -> CancelDecision:
    """How a cancel applies to a campaign in status ``current``: at once before anything is
    sent, by stopping every pod while sending, idempotently when already cancelling, never once
    finished."""
    if current in NOTHING_SENDING:
        return CancelDecision.AT_ONCE
    if current in sources_for(Transition.BEGIN_CANCEL):
        return CancelDecision.STOP_PODS
    if current in (Status.CANCELLING, Status.CANCELLED):
        return CancelDecision.ALREADY
    return CancelDecision.REFUSE


class Verdict(StrEnum):
    """The one question every sender, dispatcher and dead-chunk handler asks about a campaign
    (``herald/service_layer/stopping/verdict.py``): may it send now?"""

    SEND = "send"  # sending: go on
    HOLD = "hold"  # not now (paused, waiting for approval or its time): keep what is not sent
    STOP = "stop"  # never again (cancelling, or finished): leave the rest unsent


def verdict_for(status: Status) -> Verdict:
    """What a campaign's stored status says to a pod holding its work."""
    if status in ACTIVE:
        return Verdict.SEND
    if status in (Status.PAUSED, *NOTHING_SENDING):
        return Verdict.HOLD
    return Verdict.STOP


class PauseDecision(StrEnum):
    """What a pause request means for a campaign in a given status."""

    STOP_PODS = "stop_pods"  # in_progress: broadcast, wait for pods to stop
    ALREADY = "already"  # paused: idempotent, no second broadcast
    REFUSE = "refuse"  # anything else: nothing is sending that a pause could hold


def decide_pause(current: Status) -> PauseDecision:
    """How a pause applies to a campaign in status ``current``. Only a campaign that is sending
    can be paused: one not started yet has nothing in flight (cancel or edit it instead), one
    finalizing has every recipient recorded already."""
    if current in sources_for(Transition.PAUSE):
        return PauseDecision.STOP_PODS
    if current is Status.PAUSED:
        return PauseDecision.ALREADY
    return PauseDecision.REFUSE
