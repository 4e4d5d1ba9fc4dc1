"""Issue 30, point 7: "another Firebase project" is concluded only when nearly every answer is a
mismatch (``herald.domain.fcm_errors.wrong_project``). A project migration that leaves 30%, or
even 70%, of old tokens must never stop a campaign, however small its waves or recording groups
(a pod asks again after every group); a truly wrong project still stops within its first
hundred answers.

Three kinds of evidence: the exact probability bound the docstring quotes (a union over every
answer of a 1,000,000-recipient campaign, the worst case of a check after each answer), a seeded
simulation of pods answering in small groups, and properties of the rule (hypothesis)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.domain.fcm_errors import (
    WRONG_PROJECT_MIN_ANSWERS,
    WRONG_PROJECT_SHARE,
    may_retire_mismatched,
    wilson_bounds,
    wrong_project,
)

CAMPAIGN = 1_000_000
EXACT_UP_TO = 2_000
"""Answers summed exactly; beyond, a Chernoff bound covers every answer up to the campaign's."""


def fewest_to_stop(answered: int) -> int | None:
    """The fewest mismatches of ``answered`` that stop the campaign (the rule is monotone)."""
    if not wrong_project(answered, answered):
        return None
    low, high = 0, answered
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if wrong_project(middle, answered) else (middle + 1, high)
    return low


def binomial_tail(at_least: int, trials: int, share: float) -> float:
    """P(Binomial(trials, share) >= at_least), summed exactly in log space."""
    log_p, log_q = math.log(share), math.log1p(-share)
    return sum(math.exp(math.lgamma(trials + 1) - math.lgamma(k + 1)
                        - math.lgamma(trials - k + 1) + k * log_p + (trials - k) * log_q)
               for k in range(at_least, trials + 1))


def ever_stops_at_most(share: float) -> float:
    """An upper bound of the probability that a pod whose telling answers are mismatches with
    probability ``share`` (independently) ever stops a campaign of ``CAMPAIGN`` recipients,
    asking after every answer: the union, over every answer count, of the chance that the
    rule holds there. Exact up to ``EXACT_UP_TO``; beyond, the rule needs a mismatch share
    above 0.9, whose chance after n answers is at most exp(-n KL(0.9 || share)) (Chernoff), a
    geometric series."""
    exact = 0.0
    for answered in range(WRONG_PROJECT_MIN_ANSWERS, EXACT_UP_TO + 1):
        fewest = fewest_to_stop(answered)
        if fewest is not None:
            exact += binomial_tail(fewest, answered, share)
    target = WRONG_PROJECT_SHARE
    divergence = (target * math.log(target / share)
                  + (1 - target) * math.log((1 - target) / (1 - share)))
    rest = math.exp(-(EXACT_UP_TO + 1) * divergence) / -math.expm1(-divergence)
    assert EXACT_UP_TO < CAMPAIGN
    return exact + rest


@pytest.mark.parametrize(("share", "bound"), [(0.3, 2e-45), (0.7, 2e-13), (0.8, 4e-8)])
def test_a_migrations_share_of_old_tokens_never_stops_a_campaign(share: float,
                                                                 bound: float) -> None:
    """The figures fcm_errors.wrong_project's docstring and docs/fcm.md quote."""
    assert ever_stops_at_most(share) < bound


def test_a_wrong_project_stops_at_its_86th_answer() -> None:
    assert next(n for n in range(200) if wrong_project(n, n)) == 86
    assert fewest_to_stop(86) == 86
    assert not may_retire_mismatched(86, 86)


def _first_stop(rng: random.Random, share: float, answers: int) -> int | None:
    """A pod's telling answers in groups of 1 to 10 (the smallest waves and groups): the
    answer count at which the rule stops the campaign, or None."""
    mismatched = answered = 0
    while answered < answers:
        group = rng.randint(1, 10)
        mismatched += sum(rng.random() < share for _ in range(group))
        answered += group
        if wrong_project(mismatched, answered):
            return answered
    return None


def _former_rule_stops(rng: random.Random, share: float, answers: int) -> bool:
    """The rule before issue 30: >= 20 answers, >= half of them mismatches."""
    mismatched = answered = 0
    while answered < answers:
        group = rng.randint(1, 10)
        mismatched += sum(rng.random() < share for _ in range(group))
        answered += group
        if answered >= 20 and mismatched >= 0.5 * answered:
            return True
    return False


def test_simulated_pods_stop_only_for_a_wrong_project() -> None:
    """1,000 pods per share, each the first 2,000 answers of a campaign (past them the bound
    above leaves nothing to simulate), answered in groups of 1 to 10, seeded."""
    rng = random.Random(20261127)
    for share in (0.3, 0.7):
        assert [_first_stop(rng, share, EXACT_UP_TO) for _ in range(1_000)] == [None] * 1_000
    wrong = [_first_stop(rng, 0.99, 1_000) for _ in range(1_000)]
    assert all(stop is not None and stop <= 250 for stop in wrong)
    assert sorted(stop or 0 for stop in wrong)[500] <= 120  # median
    assert all(_first_stop(rng, 1.0, 1_000) in range(86, 96) for _ in range(100))
    former = sum(_former_rule_stops(rng, 0.3, EXACT_UP_TO) for _ in range(1_000))
    assert former > 20, "the former rule stopped 3% of a 30% migration's pods"


@given(answered=st.integers(0, 100_000), share=st.floats(0, 1))
def test_the_rule_is_consistent(answered: int, share: float) -> None:
    mismatched = round(share * answered)
    low, high = wilson_bounds(mismatched, answered)
    assert 0 <= low <= mismatched / max(answered, 1) <= high <= 1
    stops, retires = wrong_project(mismatched, answered), may_retire_mismatched(mismatched,
                                                                               answered)
    assert not (stops and retires)
    if stops and mismatched < answered:
        assert wrong_project(mismatched + 1, answered), "more mismatches never un-stop it"
    if mismatched <= 0.8 * answered:
        assert not stops
    if answered >= 300 and mismatched <= 0.7 * answered:
        assert retires, "the tokens of a 70% migration are retired once the answers tell"
