"""The campaign lifecycle table in herald/domain/status.py.

The expected table is written out here independently of ``TRANSITIONS`` (it is the documented
lifecycle), and every (transition, status) pair is checked against it.
"""

from __future__ import annotations

import itertools

import pytest

from herald.domain.status import (
    ACTIVE,
    TERMINAL,
    TESTABLE,
    TRANSITIONS,
    CancelDecision,
    InvalidTransition,
    PauseDecision,
    Status,
    Transition,
    Verdict,
    apply,
    decide_cancel,
    decide_pause,
    sources_for,
    target_of,
    verdict_for,
)

S = Status
T = Transition

EXPECTED: dict[Transition, tuple[set[Status], Status]] = {
    T.FIRE: ({S.SCHEDULED}, S.PENDING),
    T.CLAIM: ({S.PENDING}, S.IN_PROGRESS),
    T.FINALIZE: ({S.IN_PROGRESS}, S.FINALIZING),
    T.COMPLETE: ({S.FINALIZING}, S.COMPLETED),
    T.FAIL: ({S.IN_PROGRESS, S.FINALIZING}, S.FAILED),
    T.BEGIN_CANCEL: ({S.AWAITING_APPROVAL, S.SCHEDULED, S.PENDING, S.IN_PROGRESS,
                      S.FINALIZING, S.PAUSED}, S.CANCELLING),
    T.CONFIRM_CANCEL: ({S.CANCELLING}, S.CANCELLED),
    T.CONFIRM_STOP: ({S.CANCELLING}, S.FAILED),
    T.MISS: ({S.SCHEDULED}, S.MISSED),
    T.APPROVE: ({S.AWAITING_APPROVAL}, S.PENDING),
    T.APPROVE_FOR_LATER: ({S.AWAITING_APPROVAL}, S.SCHEDULED),
    T.HOLD_FOR_APPROVAL: ({S.SCHEDULED}, S.AWAITING_APPROVAL),
    T.PAUSE: ({S.IN_PROGRESS}, S.PAUSED),
    T.RESUME: ({S.PAUSED}, S.IN_PROGRESS),
}

ALL_PAIRS = list(itertools.product(Transition, Status))


def test_expected_table_covers_every_transition() -> None:
    assert set(EXPECTED) == set(Transition)
    assert set(TRANSITIONS) == set(Transition)


@pytest.mark.parametrize(("transition", "current"), ALL_PAIRS,
                         ids=[f"{t.value}-from-{s.value}" for t, s in ALL_PAIRS])
def test_apply_returns_target_exactly_from_allowed_sources(transition: Transition,
                                                           current: Status) -> None:
    sources, target = EXPECTED[transition]
    if current in sources:
        assert apply(transition, current) is target
    else:
        with pytest.raises(InvalidTransition) as caught:
            apply(transition, current)
        assert caught.value.transition is transition
        assert caught.value.current is current
        assert transition.value in str(caught.value)
        assert current.value in str(caught.value)


@pytest.mark.parametrize("transition", list(Transition))
def test_sources_for_and_target_of_agree_with_the_lifecycle(transition: Transition) -> None:
    sources, target = EXPECTED[transition]
    assert sources_for(transition) == frozenset(sources)
    assert target_of(transition) is target


def _run(start: Status, *transitions: Transition) -> list[Status]:
    path = [start]
    for transition in transitions:
        path.append(apply(transition, path[-1]))
    return path


def test_happy_path_scheduled_to_completed() -> None:
    path = _run(S.SCHEDULED, T.FIRE, T.CLAIM, T.FINALIZE, T.COMPLETE)
    assert path == [S.SCHEDULED, S.PENDING, S.IN_PROGRESS, S.FINALIZING, S.COMPLETED]


@pytest.mark.parametrize("active", [S.IN_PROGRESS, S.FINALIZING])
def test_active_campaign_cancels_through_cancelling(active: Status) -> None:
    assert _run(active, T.BEGIN_CANCEL, T.CONFIRM_CANCEL) == [active, S.CANCELLING, S.CANCELLED]


@pytest.mark.parametrize("idle", [S.AWAITING_APPROVAL, S.SCHEDULED, S.PENDING])
def test_idle_campaign_cancels_through_cancelling_with_nobody_to_wait_for(idle: Status) -> None:
    """The settler writes ``cancelled``, whatever the cancel stopped: one writer of it."""
    assert _run(idle, T.BEGIN_CANCEL, T.CONFIRM_CANCEL) == [idle, S.CANCELLING, S.CANCELLED]


@pytest.mark.parametrize("status", list(Status))
def test_the_verdict_of_every_status(status: Status) -> None:
    """The one question pods ask: sending statuses send, those that may send later hold, the
    rest stop for good."""
    expected = (Verdict.SEND if status in (S.IN_PROGRESS, S.FINALIZING) else
                Verdict.HOLD if status in (S.PAUSED, S.AWAITING_APPROVAL, S.SCHEDULED, S.PENDING)
                else Verdict.STOP)
    assert verdict_for(status) is expected


@pytest.mark.parametrize("final", [S.COMPLETED, S.FAILED, S.CANCELLED, S.MISSED])
@pytest.mark.parametrize("transition", list(Transition))
def test_nothing_leaves_a_final_status(transition: Transition, final: Status) -> None:
    # A failed campaign is retried by a new run (POST .../retry); it stays failed itself.
    with pytest.raises(InvalidTransition):
        apply(transition, final)


def test_finishing_sender_never_overwrites_cancelling_with_completed() -> None:
    """Seed 001, case 2: the conditional update for COMPLETE must not match ``cancelling``."""
    assert S.CANCELLING not in sources_for(T.COMPLETE)
    with pytest.raises(InvalidTransition):
        apply(T.COMPLETE, S.CANCELLING)


@pytest.mark.parametrize("transition", [t for t in Transition
                                        if t not in (T.CONFIRM_CANCEL, T.CONFIRM_STOP)])
def test_cancelling_only_moves_on_to_cancelled_or_failed(transition: Transition) -> None:
    with pytest.raises(InvalidTransition):
        apply(transition, S.CANCELLING)


def test_terminal_and_active_sets() -> None:
    assert frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.MISSED}) == TERMINAL
    assert frozenset({S.IN_PROGRESS, S.FINALIZING}) == ACTIVE


EXPECTED_CANCEL = {
    S.AWAITING_APPROVAL: CancelDecision.AT_ONCE,
    S.SCHEDULED: CancelDecision.AT_ONCE,
    S.PENDING: CancelDecision.AT_ONCE,
    S.IN_PROGRESS: CancelDecision.STOP_PODS,
    S.FINALIZING: CancelDecision.STOP_PODS,
    S.CANCELLING: CancelDecision.ALREADY,
    S.CANCELLED: CancelDecision.ALREADY,
    S.COMPLETED: CancelDecision.REFUSE,
    S.FAILED: CancelDecision.REFUSE,
    S.MISSED: CancelDecision.REFUSE,
    S.PAUSED: CancelDecision.STOP_PODS,
}


def test_cancel_decisions_cover_every_status() -> None:
    assert set(EXPECTED_CANCEL) == set(Status)


@pytest.mark.parametrize(("current", "decision"), list(EXPECTED_CANCEL.items()))
def test_decide_cancel(current: Status, decision: CancelDecision) -> None:
    assert decide_cancel(current) is decision


@pytest.mark.parametrize("current", list(Status))
def test_cancel_decision_matches_the_transition_it_will_use(current: Status) -> None:
    decision = decide_cancel(current)
    if decision in (CancelDecision.AT_ONCE, CancelDecision.STOP_PODS):
        assert apply(T.BEGIN_CANCEL, current) is S.CANCELLING
    else:
        with pytest.raises(InvalidTransition):
            apply(T.BEGIN_CANCEL, current)


def test_an_approved_campaign_sends_or_waits_for_its_time() -> None:
    assert _run(S.AWAITING_APPROVAL, T.APPROVE, T.CLAIM) == [
        S.AWAITING_APPROVAL, S.PENDING, S.IN_PROGRESS]
    assert _run(S.AWAITING_APPROVAL, T.APPROVE_FOR_LATER, T.FIRE) == [
        S.AWAITING_APPROVAL, S.SCHEDULED, S.PENDING]


def test_nothing_awaiting_approval_is_claimed_fired_or_missed() -> None:
    for transition in (T.CLAIM, T.FIRE, T.MISS, T.FINALIZE, T.PAUSE):
        with pytest.raises(InvalidTransition):
            apply(transition, S.AWAITING_APPROVAL)


def test_test_sends_are_allowed_before_the_campaign_finishes_or_stops() -> None:
    assert frozenset({S.AWAITING_APPROVAL, S.SCHEDULED, S.PENDING, S.IN_PROGRESS,
                      S.FINALIZING, S.PAUSED}) == TESTABLE
    assert not TESTABLE & (TERMINAL | {S.CANCELLING})


def test_a_paused_campaign_resumes_and_completes() -> None:
    path = _run(S.PENDING, T.CLAIM, T.PAUSE, T.RESUME, T.PAUSE, T.RESUME, T.FINALIZE, T.COMPLETE)
    assert path[-1] is S.COMPLETED


def test_a_paused_campaign_can_be_cancelled_but_never_completes() -> None:
    assert _run(S.PAUSED, T.BEGIN_CANCEL, T.CONFIRM_CANCEL)[-1] is S.CANCELLED
    for transition in (T.FINALIZE, T.COMPLETE, T.FAIL, T.CLAIM, T.PAUSE):
        with pytest.raises(InvalidTransition):
            apply(transition, S.PAUSED)


@pytest.mark.parametrize("current", list(Status))
def test_pause_decision_matches_the_transition_it_will_use(current: Status) -> None:
    decision = decide_pause(current)
    expected = {S.IN_PROGRESS: PauseDecision.STOP_PODS, S.PAUSED: PauseDecision.ALREADY}
    assert decision is expected.get(current, PauseDecision.REFUSE)
    if decision is PauseDecision.STOP_PODS:
        assert apply(T.PAUSE, current) is S.PAUSED
    else:
        with pytest.raises(InvalidTransition):
            apply(T.PAUSE, current)
