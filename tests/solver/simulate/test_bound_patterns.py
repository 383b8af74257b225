"""The pattern bound against the truth on small clusters.

The truth is an exact CP-SAT packing of every arrived pod (most GPU demand placed), whose plan
the project's checker must accept: the bound may never fall below it. Hand-made cases show
where the bound is tighter than the pooled LP (per-node CPU, shares packed GPU by GPU) and
random instances (hypothesis) check both facts broadly.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from solver.checker import check
from solver.plan import GangPlacement, Plan, PodPlacement, SolveStats
from solver.simulate.bound import allocation_bound_milli, upper_bound_milli
from solver.simulate.bound.patterns import PatternBound, node_kinds, pattern_bound, pod_classes
from solver.simulate.bound.pricing import NodeKind, price
from solver.simulate.bound.pricing_cpsat import fits, price_exact
from solver.simulate.timed_scenario import TracePod
from solver.simulate.trace import pod_request
from solver.types import GPU, MILLI, Gang, GpuShare, Node, ProblemError, Snapshot

EPS = 1e-6


def cluster(*specs: tuple[int, int, int, str]) -> tuple[Node, ...]:
    """Nodes from (GPUs, CPU milli, memory MiB, model)."""
    return tuple(Node(f"n{i}", cpu, mem, tuple(GPU(j, model) for j in range(gpus)))
                 for i, (gpus, cpu, mem, model) in enumerate(specs))


def pod(name: str, gpus: int, milli: int, cpu: int = 1000, mem: int = 100,
        models: frozenset[str] = frozenset()) -> TracePod:
    return TracePod(name, cpu, mem, gpus, milli, models, "LS", 0, 1)


def exact_packing_milli(nodes: tuple[Node, ...], pods: list[TracePod]) -> int:
    """The most GPU demand of ``pods`` that fits ``nodes`` at once (CP-SAT, proven optimal),
    after the checker has accepted the packing as a plan."""
    model = cp_model.CpModel()
    # b[p, n, s]: pod p uses GPU s of node n
    b = {(p, n, s): model.NewBoolVar(f"b{p}_{n}_{s}")
         for p, tp in enumerate(pods) for n, node in enumerate(nodes) for s in range(len(node.gpus))
         if tp.num_gpu and (not tp.models or node.gpus[s].model in tp.models)}
    # on[p, n]: pod p runs on node n
    on = {(p, n): model.NewBoolVar(f"on{p}_{n}") for p in range(len(pods))
          for n in range(len(nodes))}
    for p, tp in enumerate(pods):
        model.Add(sum(on[p, n] for n in range(len(nodes))) <= 1)
        for n, node in enumerate(nodes):
            held = [b[p, n, s] for s in range(len(node.gpus)) if (p, n, s) in b]
            model.Add(sum(held) == tp.num_gpu * on[p, n])
    for n, node in enumerate(nodes):
        model.Add(sum(tp.cpu_milli * on[p, n] for p, tp in enumerate(pods)) <= node.cpu_milli)
        model.Add(sum(tp.memory_mib * on[p, n] for p, tp in enumerate(pods)) <= node.memory_mib)
        for s in range(len(node.gpus)):
            model.Add(sum(tp.gpu_milli * b[p, n, s] for p, tp in enumerate(pods)
                          if (p, n, s) in b) <= MILLI)
    model.Maximize(sum(tp.num_gpu * tp.gpu_milli * on[p, n] for (p, n) in on
                       for tp in [pods[p]]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20.0
    solver.parameters.num_workers = 1
    assert solver.Solve(model) == cp_model.OPTIMAL, "the exact packing was not proven optimal"
    admitted = []
    for p, tp in enumerate(pods):
        for n, node in enumerate(nodes):
            if solver.Value(on[p, n]):
                shares = tuple(GpuShare(node.gpus[s].index, tp.gpu_milli)
                               for s in range(len(node.gpus))
                               if (p, n, s) in b and solver.Value(b[p, n, s]))
                admitted.append(GangPlacement(tp.name, (PodPlacement(tp.name, node.name,
                                                                     shares),)))
    gangs = tuple(Gang(tp.name, "trace", (pod_request(tp),)) for tp in pods)
    plan = Plan(tuple(admitted), (), SolveStats("exact", "OPTIMAL", 0.0))
    assert check(Snapshot(nodes=nodes, gangs=gangs), plan) == []
    placed = {gp.gang for gp in admitted}
    value = sum(tp.num_gpu * tp.gpu_milli for tp in pods if tp.name in placed)
    assert value == round(solver.ObjectiveValue())
    return value


def checked_packing_milli(nodes: tuple[Node, ...], pods: list[TracePod], bound: PatternBound
                          ) -> int:
    """The GPU demand of the bound's own real packing, after the checker has accepted it."""
    assert bound.packing is not None
    gangs = tuple(Gang(tp.name, "trace", (pod_request(tp),)) for tp in pods)
    assert check(Snapshot(nodes=nodes, gangs=gangs), bound.packing) == []
    by_name = {tp.name: tp for tp in pods}
    return sum(by_name[g.gang].num_gpu * by_name[g.gang].gpu_milli
               for g in bound.packing.admitted)


def test_per_node_cpu_keeps_a_pod_out() -> None:
    # Two nodes of 4 cores: together they have the 6 cores the pod asks for, one alone has not.
    nodes = cluster((1, 4000, 8000, "T4"), (1, 4000, 8000, "T4"))
    pods = [pod("big", 1, MILLI, cpu=6000)]
    assert allocation_bound_milli(nodes, pods) == MILLI
    assert pattern_bound(nodes, pods).bound_milli < EPS
    assert exact_packing_milli(nodes, pods) == 0


def test_shares_pack_gpu_by_gpu() -> None:
    # Three 400 shares on one GPU: only two fit; pooling lets the third in by a fraction.
    nodes = cluster((1, 16000, 8000, "T4"))
    pods = [pod(f"s{i}", 1, 400) for i in range(3)]
    assert allocation_bound_milli(nodes, pods) == MILLI
    bound = pattern_bound(nodes, pods)
    assert abs(bound.bound_milli - 800) < EPS
    assert exact_packing_milli(nodes, pods) == 800
    assert checked_packing_milli(nodes, pods, bound) == bound.packed_milli == 800


def test_cpu_beside_whole_gpus_counts_per_node() -> None:
    # Two 2-GPU nodes of 10 cores; each whole-GPU pod needs 6 cores: one per node, not two.
    nodes = cluster((2, 10000, 8000, "T4"), (2, 10000, 8000, "T4"))
    pods = [pod(f"w{i}", 1, MILLI, cpu=6000) for i in range(4)]
    assert allocation_bound_milli(nodes, pods) > 3000 - EPS
    assert abs(pattern_bound(nodes, pods).bound_milli - 2000) < EPS
    assert exact_packing_milli(nodes, pods) == 2000


def test_models_and_gpu_counts_are_kept() -> None:
    nodes = cluster((2, 16000, 8000, "T4"), (4, 16000, 8000, "V100"))
    pods = [pod("v", 1, MILLI, models=frozenset({"V100"})), pod("eight", 8, MILLI),
            pod("four", 4, MILLI), pod("t4", 2, MILLI, models=frozenset({"T4"}))]
    assert abs(pattern_bound(nodes, pods).bound_milli - 6000) < EPS  # "v" loses to "four"
    assert exact_packing_milli(nodes, pods) == 6000


def test_pricing_finds_the_best_single_node_fill() -> None:
    kind = node_kinds(cluster((2, 8000, 8000, "T4")))[0]
    classes = pod_classes([pod("a", 1, 600, cpu=2000), pod("b", 1, 400, cpu=5000),
                           pod("c", 1, MILLI, cpu=3000)])
    got = price(kind, classes, [c.demand_milli for c in classes])
    # 600+400 on one GPU and the whole pod: 7000 CPU of 8000, 2000 milli
    assert abs(got.profit - 2000) < EPS
    assert got.pattern == {0: 1, 1: 1, 2: 1} or sum(
        classes[i].demand_milli * k for i, k in got.pattern.items()) == 2000


def test_exact_pricing_holds_memory_per_node() -> None:
    # One GPU, 4000 MiB: two half-GPU pods of 3000 MiB each fit its GPU but not its memory.
    nodes = cluster((1, 16000, 4000, "T4"))
    pods = [pod(f"m{i}", 1, 500, mem=3000) for i in range(2)]
    pooled = pattern_bound(nodes, pods)  # memory pooled per kind: 4000 / 3000 of a pod
    assert abs(pooled.bound_milli - 2000 / 3) < 1e-3
    exact = pattern_bound(nodes, pods, exact_time_s=10.0)
    assert exact.converged
    assert abs(exact.bound_milli - 500) < 1e-3
    assert exact_packing_milli(nodes, pods) == 500


def test_upper_bound_is_the_smaller_of_the_two() -> None:
    nodes = cluster((1, 16000, 8000, "T4"), (2, 4000, 8000, "T4"))
    pods = [pod(f"s{i}", 1, 400) for i in range(3)] + [pod("w", 2, MILLI, cpu=6000)]
    pattern = pattern_bound(nodes, pods, pack=False)
    assert pattern.packing is None and pattern.packed_milli == 0
    both = upper_bound_milli(nodes, pods)
    assert both == min(pattern.bound_milli, allocation_bound_milli(nodes, pods))
    assert both >= exact_packing_milli(nodes, pods) - EPS


def test_bad_limits_name_the_parameter() -> None:
    nodes = cluster((1, 8000, 8000, "T4"))
    for kwargs in ({"time_limit_s": -1.0}, {"exact_time_s": float("nan")}, {"tolerance": -1e-3}):
        with pytest.raises(ProblemError, match=next(iter(kwargs))):
            pattern_bound(nodes, [pod("a", 1, MILLI)], **kwargs)


def test_cpu_only_pods_and_an_empty_cluster_give_zero() -> None:
    nodes = cluster((2, 8000, 8000, "T4"))
    assert pattern_bound(nodes, [pod("cpu", 0, 0)]).bound_milli == 0
    assert pattern_bound((), [pod("a", 1, MILLI)]).bound_milli == 0


@st.composite
def instances(draw: st.DrawFn) -> tuple[tuple[Node, ...], list[TracePod]]:
    specs = [(draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((4000, 8000, 16000))),
              draw(st.sampled_from((8000, 16000))), draw(st.sampled_from(("T4", "V100"))))
             for _ in range(draw(st.integers(1, 3)))]
    pods = []
    for i in range(draw(st.integers(1, 9))):
        gpus = draw(st.sampled_from((0, 1, 1, 1, 2, 4)))
        milli = draw(st.sampled_from((150, 300, 450, 600, 850, MILLI))) if gpus == 1 else MILLI
        models = draw(st.sampled_from((frozenset(), frozenset(), frozenset({"V100"}))))
        pods.append(pod(f"p{i}", gpus, milli if gpus else 0,
                        cpu=draw(st.sampled_from((0, 1000, 2000, 3000, 4000, 6000))),
                        mem=draw(st.sampled_from((100, 3000, 5000))), models=models))
    return cluster(*specs), pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_bound_is_never_below_an_exact_packing(case: tuple[tuple[Node, ...], list[TracePod]]
                                               ) -> None:
    nodes, pods = case
    bound = pattern_bound(nodes, pods)
    assert bound.converged
    exact = exact_packing_milli(nodes, pods)
    assert bound.bound_milli >= exact - EPS
    # the LP's solution rounded down and topped up is a real packing: never above the exact
    assert checked_packing_milli(nodes, pods, bound) == bound.packed_milli <= exact
    # cut after its first round, column generation still gives a valid (looser) bound
    first = pattern_bound(nodes, pods, time_limit_s=0.0)
    assert first.rounds == 1
    assert bound.bound_milli - EPS <= first.bound_milli
    assert first.bound_milli >= exact - EPS
    # shares here are multiples of 10 milli, so the bound is at least as tight as pooling
    assert bound.bound_milli <= allocation_bound_milli(nodes, pods) + EPS
    assert bound.bound_milli <= sum(p.num_gpu * p.gpu_milli for p in pods) + EPS


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pricing_is_never_below_a_real_fill(data: st.DataObject) -> None:
    """The dynamic programme's value bounds every real pattern CP-SAT finds, at any prices,
    and CP-SAT's own upper bound is never below its pattern."""
    kind = NodeKind(frozenset({"T4"}), data.draw(st.sampled_from((1, 2, 4, 8))),
                    data.draw(st.integers(1000, 40000)), data.draw(st.integers(1000, 40000)), 1)
    arrived = [pod(f"p{i}", data.draw(st.sampled_from((1, 1, 2, 4))), MILLI,
                   cpu=data.draw(st.integers(0, 12000)), mem=data.draw(st.integers(0, 12000)))
               for i in range(data.draw(st.integers(0, 4)))]
    # any share size: odd sizes make the share table round down to a coarser unit
    arrived += [pod(f"s{i}", 1, data.draw(st.one_of(st.integers(1, 99).map(lambda k: k * 10),
                                                    st.integers(1, 999))),
                    cpu=data.draw(st.integers(0, 12000)), mem=data.draw(st.integers(0, 12000)))
                for i in range(data.draw(st.integers(1, 6)))]
    classes = pod_classes(arrived)
    profits = [c.demand_milli * data.draw(st.floats(-0.5, 1.0)) for c in classes]
    relaxed = price(kind, classes, profits)
    exact = price_exact(kind, classes, profits, time_limit_s=5.0)
    assert fits(kind, classes, exact.pattern)
    assert exact.upper >= exact.profit - EPS
    assert relaxed.profit >= exact.profit - EPS
    assert abs(sum(profits[i] * k for i, k in relaxed.pattern.items()) - relaxed.profit) < 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_exact_pricing_keeps_the_bound_valid(case: tuple[tuple[Node, ...], list[TracePod]]
                                             ) -> None:
    nodes, pods = case
    relaxed = pattern_bound(nodes, pods)
    exact = pattern_bound(nodes, pods, exact_time_s=5.0)
    assert exact.bound_milli <= relaxed.bound_milli + EPS
    assert exact.bound_milli >= exact_packing_milli(nodes, pods) - EPS
