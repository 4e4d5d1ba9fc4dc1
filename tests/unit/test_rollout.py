"""The pure part of a staged rollout (herald/domain/rollout.py) and its request's validation:
wave buckets (uniform, stable, per campaign, not the first ids), the gate's arithmetic (dead
tokens left out, ``SENDER_ID_MISMATCH`` counted) and the reason's wording."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from herald.contracts.http import CampaignCreate, RolloutIn
from herald.domain.rollout import (
    GateFigures,
    HaltWhen,
    Rollout,
    RolloutWave,
    gate_figures,
    halt_reason,
    in_waves_up_to,
    percent,
    trips,
    wave_bucket,
    wave_of,
)

TOKENS = [f"token-{i:06d}" for i in range(20_000)]
WAVES = (RolloutWave(1, 300), RolloutWave(10, 300), RolloutWave(100))


def test_wave_buckets_are_uniform_over_the_percent_range() -> None:
    buckets = [wave_bucket("64f0c0ffee0000000000abcd", token) for token in TOKENS]
    assert all(0 <= b < 100 for b in buckets)
    per_decile = [sum(10 * d <= b < 10 * (d + 1) for b in buckets) for d in range(10)]
    assert all(1_800 <= n <= 2_200 for n in per_decile), per_decile
    first_percent = sum(b < 1 for b in buckets)
    assert 140 <= first_percent <= 260, first_percent


def test_a_bucket_is_stable_for_a_campaign_and_differs_between_campaigns() -> None:
    assert wave_bucket("a" * 24, "tok") == wave_bucket("a" * 24, "tok")
    first = {t for t in TOKENS if wave_bucket("a" * 24, t) < 1}
    other = {t for t in TOKENS if wave_bucket("b" * 24, t) < 1}
    assert len(first & other) < len(first) // 5, "nobody is always in the first wave"


def test_the_first_wave_is_not_the_first_ids() -> None:
    first = [i for i, t in enumerate(TOKENS) if wave_bucket("c" * 24, t) < 1]
    quartiles = [sum(q * 5_000 <= i < (q + 1) * 5_000 for i in first) for q in range(4)]
    assert all(n >= len(first) // 8 for n in quartiles), quartiles


def test_waves_are_cumulative_and_the_last_takes_everyone() -> None:
    assert [wave_of(b, WAVES) for b in (0.0, 0.99, 1.0, 9.99, 10.0, 99.99)] == [0, 0, 1, 1, 2, 2]
    rollout = Rollout(WAVES)
    assert all(in_waves_up_to("d" * 24, t, rollout, 2) for t in TOKENS[:100])
    sent_by_wave = [sum(in_waves_up_to("d" * 24, t, rollout, w) for t in TOKENS) for w in (0, 1)]
    assert sent_by_wave[0] < sent_by_wave[1] < len(TOKENS)


def test_the_gate_leaves_dead_tokens_out_and_counts_every_other_failure() -> None:
    errors = [None] * 90 + ["UNREGISTERED"] * 40 + ["INVALID_ARGUMENT"] * 5 + \
        ["SENDER_ID_MISMATCH"] * 6 + ["UNSPECIFIED_ERROR"] * 4
    figures = gate_figures(errors)
    assert figures == GateFigures(failed=10, attempted=100)
    assert figures.failure_rate == pytest.approx(0.1)


@pytest.mark.parametrize(("failed", "attempted", "halts"), [
    (3, 49, False),  # too few attempts to judge
    (10, 200, False),  # 5% is not above 5%
    (11, 200, True),
    (0, 0, False),
])
def test_the_gate_trips_only_above_its_rate_once_enough_were_attempted(
        failed: int, attempted: int, halts: bool) -> None:
    assert trips(GateFigures(failed, attempted), HaltWhen(0.05, 50)) is halts
    assert not trips(GateFigures(failed, attempted), None)


def test_the_reason_names_the_gate_the_wave_and_the_figures() -> None:
    reason = halt_reason(GateFigures(failed=3_100, attempted=10_000), HaltWhen(0.05, 50), 0)
    assert reason == "failure rate 31% > 5% after wave 1: 3,100 of 10,000"
    assert halt_reason(GateFigures(54, 1_000), HaltWhen(0.025), 2) == \
        "failure rate 5.4% > 2.5% after wave 3: 54 of 1,000"
    assert [percent(x) for x in (0.31, 0.054, 0.05, 1 / 3)] == ["31%", "5.4%", "5%", "33.3%"]


GOOD = {"waves": [{"percent": 1, "hold_s": 300}, {"percent": 10, "hold_s": 300},
                  {"percent": 100}], "halt_when": {"failure_rate_above": 0.05, "min_attempts": 50}}


def test_the_example_rollout_is_valid() -> None:
    rollout = RolloutIn.model_validate(GOOD)
    assert [w.percent for w in rollout.waves] == [1, 10, 100]
    created = CampaignCreate.model_validate({"title": "t", "body": "b", "rollout": GOOD})
    assert created.rollout == rollout


@pytest.mark.parametrize("waves", [
    [{"percent": 10}, {"percent": 5}, {"percent": 100}],  # not increasing
    [{"percent": 10}, {"percent": 10}, {"percent": 100}],  # not strictly
    [{"percent": 1}, {"percent": 50}],  # not to 100
    [{"percent": 0}, {"percent": 100}],  # 0 < percent
    [{"percent": 1}, {"percent": 101}],  # ≤ 100
    [{"percent": 1, "hold_s": -1}, {"percent": 100}],  # hold_s ≥ 0
    [{"percent": 1, "hold_s": 8 * 24 * 3600}, {"percent": 100}],  # bounded
    [{"percent": p} for p in range(1, 100)] + [{"percent": 100}],  # too many waves
    [],
])
def test_a_malformed_rollout_is_refused(waves: list[dict[str, float]]) -> None:
    with pytest.raises(ValidationError):
        RolloutIn.model_validate({"waves": waves})


@pytest.mark.parametrize("halt_when", [{"failure_rate_above": 1.5},
                                       {"failure_rate_above": -0.1},
                                       {"failure_rate_above": 0.05, "min_attempts": 0}])
def test_a_malformed_gate_is_refused(halt_when: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RolloutIn.model_validate({"waves": [{"percent": 100}], "halt_when": halt_when})
