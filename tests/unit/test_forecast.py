"""The forecast of a campaign's last recipient (herald/domain/forecast.py, issue 29 point 6):
worked scenarios with figures a person can check by hand, then properties over random fleets."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.domain.forecast import (
    FleetRates,
    Job,
    Phase,
    finish_times,
    finishes_in_s,
    rollout_phases,
    water_fill,
)
from herald.domain.lanes import Lane
from herald.domain.rollout import RolloutWave
from tests.unit.forecast_reference import reference_finish_times

FLEET = FleetRates(total_per_s=1_000, bulk_per_s=800)


def job(key: str, recipients: float, lane: Lane = Lane.STANDARD, cap: float | None = None,
        starts_in_s: float = 0.0) -> Job:
    return Job(key, lane, (Phase(recipients),), cap, starts_in_s)


# --- worked scenarios -------------------------------------------------------------------------
def test_alone_it_takes_its_size_over_the_fleets_rate_or_its_cap() -> None:
    assert finishes_in_s(job("a", 20_000), [], FLEET) == pytest.approx(20)
    assert finishes_in_s(job("a", 20_000, cap=500), [], FLEET) == pytest.approx(40)
    assert finishes_in_s(job("a", 20_000, cap=5_000), [], FLEET) == pytest.approx(20)


def test_two_equal_campaigns_share_equally_and_the_bigger_one_has_the_fleet_at_the_end() -> None:
    """10,000 and 20,000 at 1,000/s: 500/s each until 20 s (the first done), then the rest
    of the second (10,000) alone at 1,000/s: 30 s."""
    times = finish_times([job("small", 10_000), job("big", 20_000)], FLEET)
    assert times == pytest.approx({"small": 20, "big": 30})


def test_a_capped_campaigns_unused_share_goes_to_the_others() -> None:
    """Capped at 100/s beside an uncapped one: the uncapped gets 900/s."""
    times = finish_times([job("capped", 1_000, cap=100), job("free", 9_000)], FLEET)
    assert times == pytest.approx({"capped": 10, "free": 10})


def test_urgent_goes_first_and_bulk_never_takes_the_reserve() -> None:
    """Bulk alone gets 800/s (the reserve is 20%); an urgent 2,000 takes the whole 1,000/s
    for 2 s, bulk gets nothing meanwhile; a standard one gets what urgent leaves."""
    assert finishes_in_s(job("bulk", 8_000, Lane.BULK), [], FLEET) == pytest.approx(10)
    times = finish_times([job("urgent", 2_000, Lane.URGENT), job("bulk", 8_000, Lane.BULK),
                          job("standard", 1_000)], FLEET)
    assert times["urgent"] == pytest.approx(2)
    assert times["standard"] == pytest.approx(3)
    assert times["bulk"] == pytest.approx(3 + 8_000 / 800)


def test_lower_lanes_never_slow_a_campaign_down() -> None:
    urgent = job("u", 5_000, Lane.URGENT)
    bulk = [job(f"b{i}", 50_000, Lane.BULK) for i in range(10)]
    assert finishes_in_s(urgent, bulk, FLEET) == pytest.approx(5)


def test_an_urgent_capped_campaign_leaves_the_rest_to_standard() -> None:
    times = finish_times([job("u", 3_000, Lane.URGENT, cap=300), job("s", 7_000)], FLEET)
    assert times == pytest.approx({"u": 10, "s": 10})


def test_a_rollouts_holds_add_up_and_free_the_fleet_meanwhile() -> None:
    """[10% hold 30, 50% hold 60, 100%] of 10,000 alone: 1 s, 30 s held, 4 s, 60 s held, 5 s."""
    waves = [RolloutWave(10, 30), RolloutWave(50, 60), RolloutWave(100, 600)]
    rolled = Job("r", Lane.STANDARD, rollout_phases(10_000, waves))
    assert finishes_in_s(rolled, [], FLEET) == pytest.approx(100)
    # Beside 40,000 others: wave 1 at 500/s (2 s), the other alone at 1,000/s while it holds
    # (30,000 in 30 s), wave 2 at 500/s (8 s), the other's last 5,000 in the second hold,
    # then wave 3 alone (5 s).
    times = finish_times([rolled, job("other", 40_000)], FLEET)
    assert times == pytest.approx({"r": 2 + 30 + 8 + 60 + 5, "other": 2 + 30 + 8 + 5})


def test_a_running_rollout_counts_from_its_wave_and_what_it_recorded() -> None:
    waves = [RolloutWave(10, 30), RolloutWave(50, 60), RolloutWave(100)]
    assert rollout_phases(10_000, waves, wave=1, recorded=3_000) == (
        Phase(2_000, 60), Phase(5_000, 0))
    assert rollout_phases(10_000, waves, wave=2, recorded=9_999) == (Phase(1, 0),)


def test_a_campaign_holding_now_starts_when_its_hold_ends() -> None:
    held = job("held", 1_000, starts_in_s=20)
    assert finish_times([held, job("other", 10_000)], FLEET) == pytest.approx(
        {"held": 21, "other": 10})


def test_an_empty_wave_holds_only() -> None:
    rolled = Job("r", Lane.STANDARD, (Phase(0, 5), Phase(1_000)))
    assert finishes_in_s(rolled, [], FLEET) == pytest.approx(6)


def test_nothing_left_for_its_lane_means_never() -> None:
    starved = FleetRates(total_per_s=1_000, bulk_per_s=0)
    assert finishes_in_s(job("b", 10, Lane.BULK), [], starved) == math.inf
    assert finishes_in_s(job("s", 10), [], FleetRates(0, 0)) == math.inf


def test_its_own_entry_among_the_running_is_not_counted_twice() -> None:
    own = job("a", 5_000)
    assert finishes_in_s(own, [own, job("b", 5_000)], FLEET) == pytest.approx(10)


def test_water_filling_gives_small_caps_their_cap_and_splits_the_rest() -> None:
    assert water_fill(1_000, [100, 200, None, None]) == pytest.approx([100, 200, 350, 350])
    assert water_fill(1_000, [400, 500, 600]) == pytest.approx([333.33, 333.33, 333.33], rel=1e-3)
    assert water_fill(0, [None]) == [0]


def test_a_thousand_running_campaigns_are_forecast_in_well_under_a_second() -> None:
    """The api runs this on its event loop: bounded by the campaigns of the lanes that count
    (1,000 here, each capped at 1/s like the issue's sweep case, plus 20 uncapped)."""
    running = [job(f"c{i}", 60, cap=1) for i in range(1_000)]
    running += [job(f"u{i}", 5_000 * (i + 1)) for i in range(20)]
    started = time.perf_counter()
    took = finishes_in_s(job("new", 20_000), running, FLEET)
    elapsed_s = time.perf_counter() - started
    assert math.isfinite(took)
    assert elapsed_s < 1.0, elapsed_s


# --- properties ---------------------------------------------------------------------------------
lanes = st.sampled_from(list(Lane))
caps = st.one_of(st.none(), st.integers(1, 3_000).map(float))
phases = st.lists(st.builds(Phase, st.integers(0, 20_000).map(float),
                            st.integers(0, 60).map(float)), min_size=1, max_size=4)
jobs = st.builds(Job, st.uuids().map(str), lanes, phases.map(tuple), caps,
                 st.integers(0, 30).map(float))
plain_jobs = st.builds(job, st.uuids().map(str), st.integers(1, 20_000).map(float), lanes, caps)
fleets = st.builds(lambda total, share: FleetRates(float(total), total * share),
                   st.integers(100, 10_000), st.floats(0.1, 1.0))


@settings(max_examples=200, deadline=None)
@given(jobs, st.lists(plain_jobs, max_size=8), plain_jobs, fleets)
def test_one_more_campaign_never_makes_it_earlier(target: Job, running: list[Job], extra: Job,
                                                  fleet: FleetRates) -> None:
    """Other campaigns are plain ones (no waves): a competitor's holds falling later could give
    the target a free stretch it would not have had, which is how the real fleet behaves too."""
    before = finishes_in_s(target, running, fleet)
    after = finishes_in_s(target, [*running, extra], fleet)
    assert after >= before - 1e-6 * max(1.0, before)


@settings(max_examples=200, deadline=None)
@given(jobs, st.lists(jobs, max_size=8), fleets)
def test_never_sooner_than_alone_at_its_cap_with_its_holds(target: Job, running: list[Job],
                                                           fleet: FleetRates) -> None:
    alone = finishes_in_s(target, [], fleet)
    rate = min(fleet.for_lane(target.lane, fleet.total_per_s), target.rate_per_s or math.inf)
    sending = [p for p in target.phases if p.recipients > 1e-6]
    last = max((i for i, p in enumerate(target.phases) if p.recipients > 1e-6), default=-1)
    holds = sum(p.hold_s for p in target.phases[:last]) if last >= 0 else 0.0  # none after
    assert alone == pytest.approx(target.starts_in_s + sum(p.recipients for p in sending) / rate
                                  + holds, rel=1e-6, abs=1e-6)
    assert finishes_in_s(target, running, fleet) >= alone - 1e-6 * max(1.0, alone)


@settings(max_examples=200, deadline=None)
@given(st.lists(plain_jobs, min_size=1, max_size=10), st.integers(100, 10_000))
def test_uncapped_campaigns_of_one_lane_keep_the_fleet_busy_to_the_end(
        running: list[Job], total_per_s: int) -> None:
    """Work-conserving: whoever finishes when, the last one is done when all the work is."""
    same = [Job(j.key, Lane.STANDARD, j.phases) for j in running]
    times = finish_times(same, FleetRates(total_per_s, total_per_s))
    assert max(times.values()) == pytest.approx(sum(j.recipients for j in same) / total_per_s)


@settings(max_examples=100, deadline=None)
@given(jobs, st.lists(jobs, max_size=6), fleets, st.floats(1.0, 4.0))
def test_a_faster_fleet_never_makes_it_later(target: Job, running: list[Job], fleet: FleetRates,
                                             factor: float) -> None:
    faster = FleetRates(fleet.total_per_s * factor, fleet.bulk_per_s * factor)
    slow, fast = finishes_in_s(target, running, fleet), finishes_in_s(target, running, faster)
    if not math.isinf(slow):
        assert fast <= slow + 1e-6 * max(1.0, slow) or _holds_shift(target, running)


def _holds_shift(target: Job, running: list[Job]) -> bool:
    """A faster fleet moves competitors' holds too; with waves on either side the order of
    holds and sends can change, so only the plain case is held to monotony."""
    return any(len(j.phases) > 1 or j.starts_in_s for j in [target, *running])


@settings(max_examples=300, deadline=None)
@given(st.lists(jobs, max_size=12), fleets)
def test_the_fast_simulation_agrees_with_the_plain_one(running: list[Job],
                                                        fleet: FleetRates) -> None:
    """Event by event with heaps and a virtual clock per lane (herald/domain/forecast.py)
    against every rate recomputed at every event (tests/unit/forecast_reference.py)."""
    fast, plain = finish_times(running, fleet), reference_finish_times(running, fleet)
    assert fast.keys() == plain.keys()
    for key, at in plain.items():
        assert fast[key] == pytest.approx(at, rel=1e-6, abs=1e-6)
