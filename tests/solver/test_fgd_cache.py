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
    MAX_MOVES,
    MAX_PASSES,
    MOVE_COST,
    PATIENCE,
    SEARCH_SHARE,
    PassScore,
    best_pass,
    budget_for,
    passes_for,
    rank_key,
    search,
    search_cost,
)
from solver.cpsat.solve import plan_value
from solver.names import SolverName
from solver.plan import Plan, SolveStats
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


def _wide_window() -> Snapshot:
    """64 one-GPU gangs on 1,000 empty 8-GPU nodes: the cost model's pace case."""
    from solver.types import GPU, Gang, Node, PodRequest

    nodes = tuple(Node(name=f"n{i}", cpu_milli=8000, memory_mib=8192,
                       gpus=tuple(GPU(index=j, model="A100") for j in range(8)))
                  for i in range(1000))
    pods = [PodRequest(name=f"p{i}", gpu_count=1, gpu_milli=1000) for i in range(64)]
    return Snapshot(nodes=nodes, gangs=tuple(Gang(name=f"g{i}", tenant="t", pods=(p,))
                                             for i, p in enumerate(pods)))


def test_passes_follow_the_time_limit_not_the_clock() -> None:
    s = _wide_window()
    nodes, gangs = s.nodes, s.gangs
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_moves_keep_every_rule_and_the_floor(s: Snapshot) -> None:
    # quotas, topology, interference and whole gangs hold after re-ordering, as after a pass
    arrays = Arrays(s)
    before = arrays.gfree.copy(), arrays.cpu.copy()
    plan = search(s, arrays, seed=3, passes=2, moves=12)
    assert not check(s, plan), [str(v) for v in check(s, plan)]
    assert plan_value(s, plan) >= plan_value(s, place(s, "bestfit", seed=3))
    assert plan.admitted_names | {d.gang for d in plan.deferred} == {g.name for g in s.gangs}
    assert (arrays.gfree == before[0]).all() and (arrays.cpu == before[1]).all()
    again = search(s, Arrays(s), seed=3, passes=2, moves=12)  # reproducible
    assert (again.admitted, again.deferred) == (plan.admitted, plan.deferred)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_moves_never_rank_worse_than_the_passes_alone(s: Snapshot) -> None:
    w = s.policy.weights.fragmentation
    alone = search(s, Arrays(s), seed=4, passes=3)
    moved = search(s, Arrays(s), seed=4, passes=3, moves=10)
    key = [rank_key(PassScore(p.stats.detail["search_value"], 0.0, 0,
                              p.stats.detail["search_frag"]), w)[0] for p in (alone, moved)]
    assert key[1] <= key[0]
    assert moved.stats.detail["search_moves_kept"] <= moved.stats.detail["search_moves"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_the_score_of_the_moves_is_the_score_of_their_plan(s: Snapshot) -> None:
    # the moves take placements back and put them back through the journal: the end state they
    # were judged on must be exactly the returned plan applied to the snapshot's free state
    plan = search(s, Arrays(s), seed=5, passes=2, moves=8)
    fresh = Arrays(s)
    pods = {(g.name, p.name): p for g in s.gangs for p in g.pods}
    for gp in plan.admitted:
        for pp in gp.pods:
            row = fresh.row_of[pp.node]
            fresh.apply(row, pods[(gp.gang, pp.pod)],
                        [fresh.slot_of(row, g.index) for g in pp.gpus])
    assert float(fresh.frag_stats()[3].sum()) == pytest.approx(plan.stats.detail["search_frag"])
    gangs = {g.name: g for g in s.gangs}
    value = sum(gangs[a.gang].gpu_demand_milli * (1 + max(0, gangs[a.gang].priority))
                for a in plan.admitted)
    assert value == plan.stats.detail["search_value"]


def test_moves_take_what_the_share_leaves_after_the_most_passes() -> None:
    s = _wide_window()
    nodes, gangs = s.nodes, s.gangs
    # fewer passes than the most: all of the share goes to passes, as before moves
    assert budget_for(s, 0.25) == (passes_for(s, 0.25), 0)
    assert passes_for(s, 0.25) < MAX_PASSES
    one_pass = search_cost(s, 2) - search_cost(s, 1)
    previous = 0
    for limit in (2.0, 5.0, 10.0, 60.0):
        passes, moves = budget_for(s, limit)
        assert passes == MAX_PASSES and 0 <= moves <= MAX_MOVES
        assert moves >= previous  # more time, no fewer moves
        previous = moves
        if moves < MAX_MOVES:  # the most moves the rest of the share holds
            spent = search_cost(s, MAX_PASSES) + moves * MOVE_COST * one_pass
            assert spent <= SEARCH_SHARE * limit < spent + MOVE_COST * one_pass
    assert budget_for(s, 60.0)[1] == MAX_MOVES
    # a window of one gang has nothing to re-order
    assert budget_for(Snapshot(nodes=nodes, gangs=gangs[:1]), 60.0) == (1, 0)
    with pytest.raises(ValueError, match="at least 0"):
        search(s, Arrays(s), seed=1, passes=1, moves=-1)


def _shares_window(seed: int) -> Snapshot:
    """20 nodes of 4 GPUs, half used, and 40 one-pod gangs of GPU shares and whole GPUs: a
    window in which moves are made and kept."""
    from solver.types import GPU, Gang, GpuShare, Node, PodRequest, Running

    rng = np.random.default_rng(seed)
    nodes = tuple(Node(name=f"n{i}", cpu_milli=32000, memory_mib=65536,
                       gpus=tuple(GPU(index=j, model="A100") for j in range(4)))
                  for i in range(20))
    running = tuple(Running(name=f"r{i}", node=f"n{i % 20}", cpu_milli=1000, memory_mib=1024,
                            gpus=(GpuShare(index=int(i % 4), milli=int(rng.choice([300, 500,
                                                                                   810]))),),
                            tenant="t") for i in range(40))
    gangs = tuple(Gang(name=f"g{i}", tenant="t", pods=(PodRequest(
        name="p", cpu_milli=int(rng.choice([1000, 4000])), memory_mib=1024, gpu_count=1,
        gpu_milli=int(rng.choice([160, 230, 320, 470, 650, 810, 1000]))),))
        for i in range(40))
    return Snapshot(nodes=nodes, gangs=gangs, running=running)


@pytest.mark.parametrize("seed", range(6))
def test_the_moves_leave_the_state_their_plan_makes(seed: int) -> None:
    # every kept or refused move goes through the journal; the state after the last one is
    # exactly the free state with the plan applied, and what was judged is that state
    from solver.cpsat.search import _Reorder

    s = _shares_window(seed)
    work = Arrays(s)
    reorder = _Reorder(s, work, SolverName.FGD, list(s.gangs), seed=seed, steer=None)
    first = reorder.score()
    score, _, _ = reorder.improve(np.random.default_rng(seed), 30, floor=0.0, frag_weight=0.2)
    assert rank_key(score, 0.2) <= rank_key(first, 0.2)
    assert score == reorder.score()  # the state is the one last judged best
    after = (work.gfree.copy(), work.cpu.copy(), work.mem.copy())
    admitted, deferred = reorder.plan()
    fresh = Arrays(s)
    pods = {g.name: g.pods[0] for g in s.gangs}
    for gp in admitted:
        (pp,) = gp.pods
        row = fresh.row_of[pp.node]
        fresh.apply(row, pods[gp.gang], [fresh.slot_of(row, g.index) for g in pp.gpus])
    assert (fresh.gfree == after[0]).all() and (fresh.cpu == after[1]).all()
    assert (fresh.mem == after[2]).all()
    assert (work.gfree == Arrays(s).gfree).all()  # plan() rolled everything back
    plan = Plan(admitted=tuple(admitted), deferred=tuple(deferred),
                stats=SolveStats(solver="search", status="GREEDY", wall_seconds=0.0))
    assert not check(s, plan)


def test_moves_find_better_end_states_than_the_pass_they_start_from() -> None:
    # not a property of every window, but of these: some moves are kept, and the trade the
    # search ranks by improves
    from solver.cpsat.search import _Reorder

    gains = []
    for seed in range(6):
        s = _shares_window(seed)
        reorder = _Reorder(s, Arrays(s), SolverName.FGD, list(s.gangs), seed=seed, steer=None)
        first = reorder.score()
        score, kept, made = reorder.improve(np.random.default_rng(seed), 30, floor=0.0,
                                            frag_weight=0.2)
        assert kept <= made <= 30
        reorder.plan()
        gains.append((kept, rank_key(first, 0.2)[0] - rank_key(score, 0.2)[0]))
    assert sum(k for k, _ in gains) > 0 and all(g >= 0 for _, g in gains)
    assert sum(g for _, g in gains) > 0


def test_moves_stop_where_every_order_ends_alike() -> None:
    # 40 identical one-GPU gangs of two tenants on 12 free GPUs: every order admits 12 and
    # leaves nothing fragmented, so the moves stop after PATIENCE and CP-SAT keeps its time
    from solver.types import GPU, Gang, Node, PodRequest, Tenant

    nodes = tuple(Node(name=f"n{i}", cpu_milli=64000, memory_mib=65536,
                       gpus=tuple(GPU(index=j, model="A100") for j in range(4)))
                  for i in range(3))
    gangs = tuple(Gang(name=f"{t}{i}", tenant=t, pods=(PodRequest(
        name="p", cpu_milli=100, memory_mib=64, gpu_count=1, gpu_milli=1000),))
        for t in "ab" for i in range(20))
    s = Snapshot(nodes=nodes, gangs=gangs, tenants=(Tenant("a", weight=2.0), Tenant("b")))
    plan = search(s, Arrays(s), seed=0, passes=4, moves=MAX_MOVES)
    assert plan.stats.detail["search_moves"] == PATIENCE
    assert plan.stats.detail["search_moves_kept"] == 0
    assert len(plan.admitted) == 12 and not check(s, plan)
