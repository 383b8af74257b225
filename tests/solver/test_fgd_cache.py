"""The FGD cache makes FGD's own choices, and the order search's plan is one the checker takes
and never worth less than the best-fit plan it replaced as the model's hint, however its passes
are ranked."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from solver.baselines import ClusterArrays, GangPlacer, place
from solver.baselines.cluster import ClusterArrays as Arrays
from solver.checker import check
from solver.cpsat.search import (
    SEARCH_SHARE,
    PassScore,
    best_pass,
    passes_for,
    rank_key,
    search,
    search_cost,
)
from solver.cpsat.solve import plan_value
from solver.names import SolverName
from solver.types import Snapshot
from tests.solver.test_cpsat_random import snapshots


def _fgd_plan(s: Snapshot, cached: bool) -> list[object]:
    state = ClusterArrays(s)
    if not cached:
        # a cache that never applies: every pod takes the long way through policies.fgd
        state.fgd_cache().applies = lambda pod: False  # type: ignore[method-assign]
    placer = GangPlacer(state, SolverName.FGD, np.random.default_rng(7))
    out: list[object] = []
    for _ in range(2):  # twice over, with an undo between, as the search's passes go
        state.checkpoint()
        out.append([placer.place(g) for g in s.gangs])
        state.rollback()
        placer = GangPlacer(state, SolverName.FGD, np.random.default_rng(7))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cached_fgd_makes_fgds_own_choices(s: Snapshot) -> None:
    assert _fgd_plan(s, cached=True) == _fgd_plan(s, cached=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_search_plan_is_feasible_and_at_least_best_fit(s: Snapshot) -> None:
    arrays = Arrays(s)
    before = arrays.gfree.copy()
    plan = search(s, arrays, seed=3, passes=4)
    assert not check(s, plan)
    assert plan_value(s, plan) >= plan_value(s, place(s, "bestfit", seed=3))
    assert (arrays.gfree == before).all()  # the caller's state is left as it was
    again = search(s, Arrays(s), seed=3, passes=4)  # reproducible
    assert (again.admitted, again.deferred) == (plan.admitted, plan.deferred)


def test_passes_follow_the_time_limit_not_the_clock() -> None:
    from solver.types import GPU, Gang, Node, PodRequest

    nodes = tuple(Node(name=f"n{i}", cpu_milli=8000, memory_mib=8192,
                       gpus=tuple(GPU(index=j, model="A100") for j in range(8)))
                  for i in range(1000))
    pods = [PodRequest(name=f"p{i}", gpu_count=1, gpu_milli=1000) for i in range(64)]
    gangs = tuple(Gang(name=f"g{i}", tenant="t", pods=(p,)) for i, p in enumerate(pods))
    s = Snapshot(nodes=nodes, gangs=gangs)
    assert passes_for(s, 0.001) == 0
    assert passes_for(s, 0.25) < passes_for(s, 1.0) <= 16
    assert passes_for(Snapshot(nodes=nodes, gangs=gangs[:1]), 10.0) == 1
    assert passes_for(Snapshot(nodes=nodes), 1.0) == 1  # no pods (a part dealt none)
    assert passes_for(Snapshot(nodes=nodes), 1e-6) == 0
    for limit in (0.1, 0.25, 1.0):  # the most passes the cost model fits in the share
        n = passes_for(s, limit)
        assert search_cost(s, n) <= SEARCH_SHARE * limit < search_cost(s, n + 1) or n == 16


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_a_heavy_fragmentation_weight_never_takes_the_floor_below_best_fit(s: Snapshot) -> None:
    # the trade between demand and fragmentation ranks passes, but a pass admitting less than
    # the best-fit pass is never chosen, however much less it fragments
    heavy = replace(s, policy=replace(s.policy, weights=replace(s.policy.weights,
                                                                fragmentation=50.0)))
    plan = search(heavy, Arrays(heavy), seed=5, passes=6)
    assert not check(heavy, plan)
    assert plan_value(heavy, plan) >= plan_value(heavy, place(heavy, "bestfit", seed=5))


def test_passes_are_ranked_by_demand_less_weighted_fragmentation() -> None:
    bestfit = PassScore(4000.0, 4000.0, 5, 9000.0)
    # 1,000 milli-GPU more admitted but 6,000 more expected fragmentation: at the default
    # weight (0.2) the tidier pass wins; at 0 the old order (demand first) holds
    more, tidier = PassScore(5000.0, 5000.0, 6, 9000.0), PassScore(4000.0, 4000.0, 5, 3000.0)
    assert best_pass([bestfit, more, tidier], 0.2) == 2
    assert best_pass([bestfit, more, tidier], 0.0) == 1
    assert best_pass([bestfit, more, tidier], -1.0) == 1  # refused by the policy: as 0
    # between equal trades the aged demand, then the pods, then fragmentation decide, then
    # the earliest pass
    assert best_pass([bestfit, PassScore(4000.0, 3000.0, 9, 1.0),
                      PassScore(4000.0, 4500.0, 1, 1.0)], 0.0) == 2
    assert best_pass([bestfit, PassScore(4000.0, 4000.0, 6, 1.0),
                      PassScore(4000.0, 4000.0, 6, 1.0)], 0.0) == 1
    assert rank_key(PassScore(1.0, 1.0, 2, 9.0), 0.0) < rank_key(PassScore(1.0, 1.0, 1, 0.0), 0.0)


def test_a_pass_admitting_less_than_best_fit_is_never_kept() -> None:
    # however little it fragments: the floor CP-SAT is held to stays at best-fit's
    scores = [PassScore(4000.0, 4000.0, 5, 9000.0), PassScore(3999.0, 3999.0, 5, 0.0)]
    assert best_pass(scores, 0.2) == 0
    assert best_pass(scores, 1e6) == 0
    with pytest.raises(ValueError, match="best-fit pass"):
        best_pass([], 0.2)
