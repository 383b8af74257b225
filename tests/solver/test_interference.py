"""The interference model: its algebra (bounds, monotonicity, saturation), the sharing bans,
the SLO check, the shipped defaults and the EWMA refinement from measurements."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from solver.interference import (
    DEFAULT_CONTENTION,
    DEFAULT_PROFILES,
    UNCLASSIFIED,
    UtilisationSample,
    group_allowed,
    group_excess_slowdown,
    may_share,
    pair_table,
    predicted_latency_ms,
    profile_for,
    refine_profile,
    refine_profiles,
    resolve_profiles,
    slowdown,
    within_slo,
)
from solver.types import ProblemError, QoSProfile

P = resolve_profiles()
LI = P["latency-inference"]

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
profiles = st.builds(QoSProfile, name=st.sampled_from(["a", "b", "c", "d"]), sm=unit, membw=unit)


def test_alone_is_no_slowdown() -> None:
    for p in DEFAULT_PROFILES:
        assert slowdown(p, []) == 1.0


def test_saturated_compute_stretches_by_total_demand() -> None:
    a = QoSProfile(name="a", sm=0.8, membw=0.0)
    b = QoSProfile(name="b", sm=0.8, membw=0.0)
    # Proportional share of an oversubscribed SM: 1.6, plus contention from a 0.8-busy neighbour.
    assert slowdown(a, [b]) == pytest.approx(1.6 + DEFAULT_CONTENTION * 0.8)
    assert slowdown(a, [b], contention=0.0) == pytest.approx(1.6)


def test_below_saturation_costs_at_most_the_contention_term() -> None:
    a = QoSProfile(name="a", sm=0.3, membw=0.2)
    b = QoSProfile(name="b", sm=0.3, membw=0.2)
    s = slowdown(a, [b])
    assert 1.0 < s <= 1.0 + DEFAULT_CONTENTION
    assert slowdown(a, [b], contention=0.0) == 1.0


def test_a_pod_that_uses_nothing_is_not_slowed() -> None:
    idle = QoSProfile(name="idle", sm=0.0, membw=0.0)
    assert slowdown(idle, [P["training"], P["training"]]) == 1.0


def test_memory_bound_pod_feels_bandwidth_not_compute() -> None:
    membound = QoSProfile(name="m", sm=0.0, membw=0.7)
    compute_hog = QoSProfile(name="c", sm=1.0, membw=0.0)
    bandwidth_hog = QoSProfile(name="b", sm=0.0, membw=0.7)
    assert slowdown(membound, [compute_hog]) == 1.0
    assert slowdown(membound, [bandwidth_hog]) == pytest.approx(1.4 + DEFAULT_CONTENTION * 0.7)


@given(profiles, st.lists(profiles, max_size=4))
def test_slowdown_is_at_least_one_and_finite(p: QoSProfile, others: list[QoSProfile]) -> None:
    s = slowdown(p, others)
    assert s >= 1.0
    assert math.isfinite(s)


@given(profiles, st.lists(profiles, max_size=3), profiles)
def test_another_neighbour_never_helps(
    p: QoSProfile, others: list[QoSProfile], extra: QoSProfile
) -> None:
    assert slowdown(p, [*others, extra]) >= slowdown(p, others) - 1e-12


@given(profiles, profiles, unit, unit)
def test_a_busier_neighbour_never_helps(p: QoSProfile, o: QoSProfile, sm: float, bw: float) -> None:
    busier = QoSProfile(name=o.name, sm=max(o.sm, sm), membw=max(o.membw, bw))
    assert slowdown(p, [busier]) >= slowdown(p, [o]) - 1e-12


def test_predicted_latency_is_solo_latency_times_slowdown() -> None:
    others = [P["batch-inference"]]
    assert predicted_latency_ms(LI, others) == pytest.approx(20.0 * slowdown(LI, others))
    assert predicted_latency_ms(P["training"], others) is None


def test_slo_holds_with_light_neighbours_and_breaks_with_heavy_ones() -> None:
    bi = P["batch-inference"]
    assert within_slo(LI, [])
    assert within_slo(LI, [bi])
    assert within_slo(LI, [bi, bi])
    assert not within_slo(LI, [bi, bi, bi])
    # A class without an SLO never fails the check, however crowded.
    assert within_slo(P["training"], [P["training"]] * 5)


def test_lighter_neighbours_are_predicted_cheaper() -> None:
    assert slowdown(LI, [P["interactive"]]) < slowdown(LI, [P["best-effort"]])
    assert slowdown(LI, [P["best-effort"]]) < slowdown(LI, [P["batch-inference"]])


def test_may_share_honours_exclusive_and_bans_in_both_directions() -> None:
    a = QoSProfile(name="a")
    b = QoSProfile(name="b", no_share_with=frozenset({"a"}))
    solo = QoSProfile(name="solo", exclusive=True)
    assert may_share(a, QoSProfile(name="c"))
    assert not may_share(a, b) and not may_share(b, a)
    assert not may_share(a, solo) and not may_share(solo, a)
    assert not may_share(LI, P["training"]) and not may_share(P["training"], LI)


@given(profiles, profiles)
def test_may_share_is_symmetric(a: QoSProfile, b: QoSProfile) -> None:
    assert may_share(a, b) == may_share(b, a)


def test_group_allowed_checks_bans_and_every_slo() -> None:
    bi = P["batch-inference"]
    assert group_allowed([P["training"]])
    assert group_allowed([LI, bi])
    assert not group_allowed([LI, P["training"]])
    assert not group_allowed([bi, LI, bi, bi])  # LI would miss its SLO


def test_group_excess_slowdown() -> None:
    assert group_excess_slowdown([P["training"]]) == 0.0
    pair = [LI, P["batch-inference"]]
    expected = (slowdown(pair[0], [pair[1]]) - 1) + (slowdown(pair[1], [pair[0]]) - 1)
    assert group_excess_slowdown(pair) == pytest.approx(expected)


def test_pair_table_covers_every_ordered_pair() -> None:
    table = pair_table(DEFAULT_PROFILES)
    n = len(DEFAULT_PROFILES)
    assert len(table) == n * n
    for a in DEFAULT_PROFILES:
        for b in DEFAULT_PROFILES:
            assert table[a.name, b.name] == slowdown(a, [b])


def test_defaults_have_unique_names_and_a_latency_class() -> None:
    names = [p.name for p in DEFAULT_PROFILES]
    assert len(names) == len(set(names))
    shipped = {"training", "batch-inference", "latency-inference", "interactive", "best-effort"}
    assert shipped <= set(names)
    assert any(p.latency_sensitive for p in DEFAULT_PROFILES)


def test_policy_overrides_replace_and_add_classes() -> None:
    mine = QoSProfile(name="training", sm=0.5, membw=0.5)
    new = QoSProfile(name="render", sm=0.7, membw=0.2)
    profiles = resolve_profiles([mine, new])
    assert profiles["training"] is mine
    assert profiles["render"] is new
    assert profiles["interactive"] == P["interactive"]
    assert profile_for(None, profiles) is UNCLASSIFIED
    assert profile_for("nonesuch", profiles) is UNCLASSIFIED
    assert profile_for("render", profiles) is new


def test_refinement_converges_to_repeated_observations() -> None:
    p = P["batch-inference"]
    sample = UtilisationSample("batch-inference", sm=0.9, membw=0.2, memory_mib=10_000)
    for _ in range(200):
        p = refine_profile(p, sample, alpha=0.1)
    assert p.sm == pytest.approx(0.9, abs=1e-6)
    assert p.membw == pytest.approx(0.2, abs=1e-6)
    assert p.memory_mib == 10_000
    # SLO-related fields are never touched by utilisation readings.
    refined_li = refine_profile(LI, UtilisationSample("latency-inference", 0.5, 0.5), alpha=1.0)
    assert (refined_li.solo_latency_ms, refined_li.slo_ms) == (LI.solo_latency_ms, LI.slo_ms)
    assert (refined_li.sm, refined_li.membw) == (0.5, 0.5)


def test_refinement_never_forgets_a_larger_footprint() -> None:
    p = QoSProfile(name="x", sm=0.1, membw=0.1, memory_mib=1_000)
    refined = refine_profile(p, UtilisationSample("x", 0.1, 0.1, memory_mib=30_000), alpha=0.1)
    assert refined.memory_mib == 30_000


def test_refinement_without_a_memory_reading_keeps_the_footprint() -> None:
    p = QoSProfile(name="x", sm=0.1, membw=0.1, memory_mib=12_000)
    refined = refine_profile(p, UtilisationSample("x", 0.9, 0.9), alpha=0.5)
    assert refined.memory_mib == 12_000
    assert refined.sm == pytest.approx(0.5)


def test_refinement_rejects_bad_input_naming_the_field() -> None:
    p = P["training"]
    with pytest.raises(ProblemError, match=r"refine\.alpha"):
        refine_profile(p, UtilisationSample("training", 0.5, 0.5), alpha=0.0)
    with pytest.raises(ProblemError, match=r"qos_class"):
        refine_profile(p, UtilisationSample("interactive", 0.5, 0.5))
    with pytest.raises(ProblemError, match=r"samples\[training\]\.sm"):
        UtilisationSample("training", 1.5, 0.5)
    with pytest.raises(ProblemError, match=r"samples\[training\]\.membw"):
        UtilisationSample("training", 0.5, -0.1)
    with pytest.raises(ProblemError, match=r"memory_mib"):
        UtilisationSample("training", 0.5, 0.5, memory_mib=-1)


def test_refine_profiles_folds_known_classes_and_skips_unknown() -> None:
    samples = [
        UtilisationSample("training", 1.0, 1.0),
        UtilisationSample("unheard-of", 1.0, 1.0),
    ]
    out = refine_profiles(P, samples, alpha=0.5)
    assert "unheard-of" not in out
    assert out["training"].sm == pytest.approx((0.85 + 1.0) / 2)
    assert out["interactive"] == P["interactive"]
    assert P["training"].sm == 0.85  # inputs untouched
