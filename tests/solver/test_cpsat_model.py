"""The model's recipe in steps: one build serves the search and the scoring of a given plan."""

from __future__ import annotations

from test_api import _window

from solver.baselines import place
from solver.checker import check
from solver.cpsat.instance import make_instance
from solver.cpsat.model import (
    add_hint,
    build,
    fixed_parameters,
    read_back,
    score_plan,
    search_parameters,
    solve,
    solve_window,
)
from solver.plan import Plan


def test_scoring_the_models_own_plan_gives_back_its_objective_and_terms() -> None:
    s = _window()
    hint = place(s, "bestfit")
    found = solve_window(s, hint=hint, time_limit=30.0, seed=3, deterministic_time=2.0)
    assert found.status == "OPTIMAL" and found.admitted is not None
    scored = score_plan(s, Plan(tuple(found.admitted), (), hint.stats))
    assert scored.status == "OPTIMAL" and scored.admitted == found.admitted
    # the stay term is relative to the hint the solve started from; scoring has none
    stay = found.terms.pop("stay", 0.0)
    assert scored.objective == found.objective - stay
    assert scored.terms == found.terms


def test_the_steps_compose_to_solve_window() -> None:
    s = _window()
    hint = place(s, "bestfit")
    bm = build(make_instance(s, hint=hint))
    add_hint(bm, hint)
    solver, code = solve(bm.model, search_parameters(budget=30.0, deterministic_time=2.0,
                                                     seed=3, workers=1))
    stepwise = read_back(solver, code, bm)
    whole = solve_window(s, hint=hint, time_limit=30.0, seed=3, deterministic_time=2.0)
    assert stepwise.admitted is not None and not check(s, Plan(tuple(stepwise.admitted), (),
                                                              hint.stats))
    assert (stepwise.status, stepwise.admitted, stepwise.objective, stepwise.terms) == (
        whole.status, whole.admitted, whole.objective, whole.terms)


def test_search_parameters_are_deterministic_and_light() -> None:
    one = search_parameters(budget=2.0, deterministic_time=None, seed=7, workers=1)
    assert (one.max_time_in_seconds, one.max_deterministic_time) == (2.0, 2.0)
    assert (one.random_seed, one.num_workers, one.interleave_search) == (7, 1, False)
    assert one.relative_gap_limit == 1e-3 and one.symmetry_level == 0
    many = search_parameters(budget=2.0, deterministic_time=0.5, seed=7, workers=4)
    assert many.max_deterministic_time == 0.5 and many.num_workers == 4
    assert many.interleave_search
    fixed = fixed_parameters(time_limit=30.0)
    assert (fixed.max_time_in_seconds, fixed.num_workers) == (30.0, 1)
