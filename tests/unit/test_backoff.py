"""``backoff_s`` (herald/service_layer/sending/window.py): exponential backoff with full jitter, capped,
never shorter than FCM's Retry-After.

The documented rule: a uniform draw in ``[0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)]``,
raised to Retry-After when FCM asked for longer.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Iterator

import pytest

from herald.service_layer.sending import window as delivery
from herald.service_layer.sending.window import BACKOFF_BASE_S, BACKOFF_CAP_S, backoff_s

SAMPLES = 2000


def ceiling(attempt: int) -> float:
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** attempt)


@pytest.fixture
def seeded() -> Iterator[None]:
    """Deterministic draws from the module-level generator, restored afterwards."""
    state = random.getstate()
    random.seed(20260308)
    try:
        yield
    finally:
        random.setstate(state)


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("retry_after", [0.1, 1.0, 5.0, 29.9, 30.0, 45.0, 600.0])
@pytest.mark.parametrize("attempt", [0, 1, 3, 6, 12])
def test_never_shorter_than_retry_after(attempt: int, retry_after: float) -> None:
    for _ in range(200):
        assert backoff_s(attempt, retry_after) >= retry_after


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("retry_after", [45.0, 120.0, 3600.0])
def test_retry_after_above_the_cap_is_honoured_exactly(retry_after: float) -> None:
    for attempt in range(10):
        assert backoff_s(attempt, retry_after) == retry_after


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("retry_after", [None, 0.0])
@pytest.mark.parametrize("attempt", [0, 1, 2, 5, 6, 10, 30, 64, 500])
def test_capped_without_retry_after(attempt: int, retry_after: float | None) -> None:
    for _ in range(200):
        assert 0.0 <= backoff_s(attempt, retry_after) <= BACKOFF_CAP_S


@pytest.mark.parametrize("attempt", [1024, 10_000])
def test_capped_even_for_huge_attempt_numbers(attempt: int) -> None:
    """fcm_max_retries has no upper bound in settings, so any attempt number must stay capped."""
    assert 0.0 <= backoff_s(attempt, None) <= BACKOFF_CAP_S


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("attempt", range(8))
def test_draws_stay_within_the_exponential_ceiling(attempt: int) -> None:
    draws = [backoff_s(attempt, None) for _ in range(SAMPLES)]
    assert max(draws) <= ceiling(attempt)
    assert min(draws) >= 0.0
    # full jitter: the draws spread over the whole range, not clustered at the top
    assert max(draws) > 0.9 * ceiling(attempt)
    assert min(draws) < 0.1 * ceiling(attempt)


@pytest.mark.usefixtures("seeded")
def test_mean_backoff_grows_with_attempt_until_the_cap() -> None:
    means = [statistics.fmean(backoff_s(a, None) for _ in range(SAMPLES)) for a in range(10)]
    for attempt, mean in enumerate(means):
        # uniform on [0, c] has mean c/2; 2000 samples keep it within a few percent
        assert mean == pytest.approx(ceiling(attempt) / 2, rel=0.08)
    growing = means[:6]  # 0.5 * 2**5 = 16 < 30: still below the cap
    assert all(later > 1.5 * earlier for earlier, later in itertools.pairwise(growing))


def test_upper_end_of_the_jitter_doubles_per_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the draw pinned to its upper end, the wait is the ceiling itself."""
    monkeypatch.setattr(delivery.random, "uniform", lambda low, high: high)
    assert [backoff_s(a, None) for a in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_lower_end_of_the_jitter_is_zero_or_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery.random, "uniform", lambda low, high: low)
    assert backoff_s(4, None) == 0.0
    assert backoff_s(4, 2.5) == 2.5
