"""The FGD cache makes FGD's own choices, and the order search's plan is one the checker takes
and never worth less than the best-fit plan it replaced as the model's hint."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from solver.baselines import ClusterArrays, GangPlacer, place
from solver.baselines.cluster import ClusterArrays as Arrays
from solver.checker import check
from solver.cpsat.search import SEARCH_SHARE, passes_for, search, search_cost
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
