"""The greedy floor must not undo the fair split CP-SAT chose.

Regression: two tenants (weights 2:1) burst 20 single-GPU gangs each onto 12 GPUs. Team-a's
gangs arrived a few seconds earlier, so aging makes each worth a hair more; the first-come
best-fit hint admits 12 of team-a's. CP-SAT found 8:4, but the floor compared demand weighted by
priority *and aging*, so the hint (12:0) was released: weights never mattered when both tenants
had more work than fits. The floor now weighs demand by priority alone and ties go to CP-SAT.
"""

from __future__ import annotations

from test_cpsat_cases import gang, node, pod, snap, solve

from solver.api import solve as api_solve
from solver.baselines import place
from solver.checker import check
from solver.cpsat.fairness import plan_fairness
from solver.cpsat.solve import choose, plan_value
from solver.plan import Plan
from solver.types import Snapshot, Tenant


def _burst(quota: int | None = 6000) -> Snapshot:
    gangs = [gang(f"{t}{i}", pod(cpu_milli=100, memory_mib=64), tenant=t,
                  wait_seconds=6 if t == "a" else 5) for t in "ab" for i in range(20)]
    return snap([node(f"n{i}", gpus=4) for i in range(3)], gangs,
                tenants=(Tenant("a", quota_milli=quota, weight=2.0),
                         Tenant("b", quota_milli=quota, weight=1.0)))


def _split(plan: Plan) -> tuple[int, int]:
    names = plan.admitted_names
    return sum(n.startswith("a") for n in names), sum(n.startswith("b") for n in names)


def test_plan_fairness_is_the_models_fairness_term() -> None:
    s = _burst()
    res = solve(s, time_limit=2.0)
    assert res.admitted is not None
    plan = Plan(tuple(res.admitted), (), place(s, "bestfit").stats)
    assert abs(plan_fairness(s, plan) - res.terms["fairness"]) < 1e-6
    assert plan_fairness(s, place(s, "bestfit")) == 0.0  # team-b gets nothing: low is 0


def test_a_first_come_hint_does_not_override_the_weighted_split() -> None:
    s = _burst()
    hint = place(s, "bestfit")
    assert _split(hint) == (12, 0)  # first come: the premise of the regression
    res = solve(s, time_limit=2.0)
    plan, why = choose(s, res, hint, judge=check)
    assert why == "" and _split(plan) == (8, 4)
    assert plan_value(s, plan) == plan_value(s, hint)  # the same demand, so CP-SAT's fair split
    assert plan_fairness(s, plan) > plan_fairness(s, hint)  # stands on its fairness term


def test_the_solver_splits_by_weight_with_and_without_quotas() -> None:
    for quota in (6000, None):
        plan = api_solve(_burst(quota), solver="cpsat", time_limit=1.0, seed=0)
        assert _split(plan) == (8, 4), (quota, plan.stats.detail)


def test_a_partitioned_window_splits_by_weight_too() -> None:
    plan = api_solve(_burst(), solver="cpsat", time_limit=2.0, seed=0, partitions=2)
    assert _split(plan) == (8, 4), plan.stats.detail
