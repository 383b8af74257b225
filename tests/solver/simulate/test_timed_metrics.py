"""The timed replay's formulas on inputs whose answers are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from solver.simulate.metrics import (
    gpu_power_watts,
    jain_index,
    percentile,
    percentiles,
    tenant_shares,
    time_weighted_mean,
    weighted_jain,
    weighted_max_min,
)


def test_jain_is_one_for_equal_and_one_over_n_for_a_monopoly() -> None:
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    # (1+2+3)^2 / (3 * (1+4+9)) = 36 / 42
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)
    assert jain_index([0.0, 0.0]) == 1.0


def test_jain_rejects_empty_and_negative() -> None:
    with pytest.raises(ValueError):
        jain_index([])
    with pytest.raises(ValueError):
        jain_index([1.0, -1.0])


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=30))
@example([2.8503483578591512e-161, 2.8503483578591512e-161])  # squares underflow: was 1.003
@example([1e-300, 0.0, 0.0])  # one party has everything: 1/3, not a false 1.0
def test_jain_is_between_one_over_n_and_one(xs: list[float]) -> None:
    j = jain_index(xs)
    assert 1 / len(xs) - 1e-9 <= j <= 1 + 1e-9


def test_shares_against_weights() -> None:
    shares = tenant_shares({"team-a": 200.0, "team-b": 100.0, "team-c": 100.0},
                           {"team-a": 2.0, "team-b": 1.0, "team-c": 1.0})
    assert [s.tenant for s in shares] == ["team-a", "team-b", "team-c"]
    assert [s.share for s in shares] == pytest.approx([0.5, 0.25, 0.25])
    assert [s.entitled for s in shares] == pytest.approx([0.5, 0.25, 0.25])
    assert weighted_jain(shares) == pytest.approx(1.0)


def test_a_tenant_with_nothing_counts_and_lowers_fairness() -> None:
    shares = tenant_shares({"team-a": 300.0}, {"team-a": 1.0, "team-b": 1.0})
    assert shares[1].share == 0.0 and shares[1].ratio == 0.0
    assert shares[0].ratio == pytest.approx(2.0)
    assert weighted_jain(shares) == pytest.approx(0.5)


def test_weights_must_be_positive() -> None:
    with pytest.raises(ValueError):
        tenant_shares({}, {"team-a": 0.0})


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1,
                max_size=50),
       st.floats(min_value=0, max_value=100))
def test_percentile_agrees_with_numpy(values: list[float], q: float) -> None:
    assert math.isclose(percentile(values, q), float(np.percentile(values, q)),
                        rel_tol=1e-9, abs_tol=1e-6)


def test_percentiles_of_nothing_are_zero() -> None:
    assert percentiles([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    assert percentiles([1, 2, 3, 4, 5], (50,)) == {"p50": 3.0}
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_time_weighted_mean_of_a_step_series() -> None:
    # 0 for 10 s, 1 for 10 s, 0.5 for 20 s -> (0 + 10 + 10) / 40
    pts = [(0.0, 0.0), (10.0, 1.0), (20.0, 0.5)]
    assert time_weighted_mean(pts, 40.0) == pytest.approx(0.5)
    # several points at one instant: only the last one holds
    assert time_weighted_mean([(0.0, 1.0), (0.0, 0.0), (5.0, 1.0)], 10.0) == pytest.approx(0.5)
    assert time_weighted_mean([], 10.0) == 0.0
    with pytest.raises(ValueError):
        time_weighted_mean([(5.0, 1.0), (1.0, 0.0)], 10.0)


def test_power_is_linear_in_the_allocated_share_and_clamped() -> None:
    assert gpu_power_watts(50, 400, 0) == 50
    assert gpu_power_watts(50, 400, 500) == pytest.approx(225)
    assert gpu_power_watts(50, 400, 1000) == 400
    assert gpu_power_watts(50, 400, 1500) == 400


def test_max_min_gives_small_demands_in_full_and_splits_the_rest_by_weight() -> None:
    w = {"a": 2.0, "b": 1.0, "c": 1.0}
    # c asks for little: it gets it all; a and b split the remaining 9 as 2:1
    fair = weighted_max_min(10.0, {"a": 100.0, "b": 100.0, "c": 1.0}, w)
    assert fair == pytest.approx({"a": 6.0, "b": 3.0, "c": 1.0})
    # enough for everyone: everyone gets its demand
    assert weighted_max_min(10.0, {"a": 2.0, "b": 3.0, "c": 0.0}, w) == pytest.approx(
        {"a": 2.0, "b": 3.0, "c": 0.0})
    # everyone over-asks: the weights decide
    assert weighted_max_min(8.0, {"a": 9.0, "b": 9.0, "c": 9.0}, w) == pytest.approx(
        {"a": 4.0, "b": 2.0, "c": 2.0})


@given(st.floats(min_value=0, max_value=100),
       st.dictionaries(st.sampled_from("abcde"), st.floats(min_value=0, max_value=50),
                       min_size=1))
def test_max_min_never_exceeds_demand_or_capacity(capacity: float, demands: dict[str, float]
                                                  ) -> None:
    weights = {t: 1.0 + i for i, t in enumerate(sorted(demands))}
    fair = weighted_max_min(capacity, demands, weights)
    assert sum(fair.values()) <= capacity + 1e-6
    assert all(fair[t] <= demands[t] + 1e-6 for t in demands)
    # work-conserving: either everyone is satisfied or the capacity is used up
    assert (all(fair[t] >= demands[t] - 1e-6 for t in demands)
            or sum(fair.values()) >= capacity - 1e-6)


def test_jain_holds_for_values_whose_squares_underflow() -> None:
    assert jain_index([1e-300, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([3e-161, 3e-161]) == 1.0
    assert jain_index([1e-300, 3e-300]) == pytest.approx(jain_index([1.0, 3.0]))
