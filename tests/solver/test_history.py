"""Run times learned from finished pods (solver/history.py): the median of each kind's last
runs once enough finished, nothing while learning is off, bounded memory per tenant that no
other tenant can push out, and hostile run times refused."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from solver.history import MAX_KINDS_PER_TENANT, Kind, RunHistory
from solver.types import MAX_WAIT_SECONDS, LearnedRuntimes, ProblemError

ON = LearnedRuntimes(enabled=True, min_samples=3, samples=5)
TRAIN = Kind("team-a", "Job", 8)


def test_the_median_of_the_last_runs_once_enough_finished() -> None:
    h = RunHistory(ON)
    h.record(TRAIN, 100.0)
    h.record(TRAIN, 300.0)
    assert h.estimate(TRAIN) is None  # two of the three needed
    h.record(TRAIN, 200.0)
    assert h.estimate(TRAIN) == 200.0
    for seconds in (1000.0, 1000.0, 1000.0, 5.0):  # only the last five count
        h.record(TRAIN, seconds)
    assert h.samples(TRAIN) == 5
    assert h.estimate(TRAIN) == 1000.0  # 200, 1000, 1000, 1000, 5


def test_one_runaway_or_crash_does_not_move_the_median_far() -> None:
    h = RunHistory(ON)
    for seconds in (600.0, 610.0, 590.0, 86_400.0, 1.0):
        h.record(TRAIN, seconds)
    assert h.estimate(TRAIN) == 600.0


def test_kinds_are_apart_and_learning_off_answers_nothing() -> None:
    h = RunHistory(LearnedRuntimes(enabled=False, min_samples=1, samples=5))
    h.record(TRAIN, 100.0)
    assert h.estimate(TRAIN) is None and h.samples(TRAIN) == 1  # kept, not used
    h.settings = LearnedRuntimes(enabled=True, min_samples=1, samples=5)
    assert h.estimate(TRAIN) == 100.0
    for other in (Kind("team-b", "Job", 8), Kind("team-a", "Pod", 8), Kind("team-a", "Job", 4)):
        assert h.estimate(other) is None, other


def test_fewer_samples_in_a_new_policy_keep_the_latest() -> None:
    h = RunHistory(ON)
    for seconds in (1.0, 2.0, 3.0, 4.0, 5.0):
        h.record(TRAIN, seconds)
    h.settings = LearnedRuntimes(enabled=True, min_samples=1, samples=2)
    h.record(TRAIN, 6.0)
    assert h.samples(TRAIN) == 2 and h.estimate(TRAIN) == 5.5


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                 st.text(max_size=5), st.none(), st.booleans()))
def test_a_run_time_that_is_no_duration_is_refused(seconds: object) -> None:
    h = RunHistory(LearnedRuntimes(enabled=True, min_samples=1, samples=3))
    ok = (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
          and math.isfinite(seconds) and 0 <= seconds <= MAX_WAIT_SECONDS)
    assert h.record(TRAIN, seconds) is ok  # type: ignore[arg-type]
    assert h.samples(TRAIN) == int(ok)
    est = h.estimate(TRAIN)
    assert est is None or (math.isfinite(est) and 0 <= est <= MAX_WAIT_SECONDS)


def test_a_tenant_flooding_made_up_kinds_keeps_its_memory_bounded_and_others_kinds() -> None:
    h = RunHistory(LearnedRuntimes(enabled=True, min_samples=1, samples=3))
    victim = Kind("team-b", "Job", 8)
    h.record(victim, 500.0)
    for i in range(10 * MAX_KINDS_PER_TENANT):
        h.record(Kind("team-a", f"Made{i}", 1), 1.0)
    assert h.kinds() == MAX_KINDS_PER_TENANT + 1
    assert h.estimate(victim) == 500.0
    # the least recently finished of its own kinds went first
    assert h.estimate(Kind("team-a", "Made0", 1)) is None
    assert h.estimate(Kind("team-a", f"Made{10 * MAX_KINDS_PER_TENANT - 1}", 1)) == 1.0


@pytest.mark.parametrize(("kw", "path"), [
    ({"min_samples": 0}, "policy.learned_runtimes.min_samples"),
    ({"samples": 0}, "policy.learned_runtimes.samples"),
    ({"samples": 10_000}, "policy.learned_runtimes.samples"),
    ({"min_samples": 5, "samples": 3}, "policy.learned_runtimes.min_samples"),
])
def test_settings_out_of_bounds_name_the_field(kw: dict[str, int], path: str) -> None:
    with pytest.raises(ProblemError) as err:
        LearnedRuntimes(**kw)
    assert err.value.path == path
