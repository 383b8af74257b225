"""FGD's fragmentation measure: the vectorised table equals the paper's definition, and the FGD
policy picks the placement of least fragmentation increase."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.baselines import place
from solver.fragmentation import FragTable, node_fragmentation, pod_fragmentation, typical_pods
from solver.types import GPU, Gang, GpuShare, Node, PodRequest, Running, Snapshot, SolverPolicy
from solver.types import TypicalPod as TP

MODELS = ["T4", "V100"]

typical = st.builds(
    lambda cpu, count, milli, spec, w: TP(cpu, count, milli if count == 1 else 1000 * (count > 0),
                                          frozenset(spec) if count else frozenset(), w),
    st.integers(0, 16000), st.sampled_from([0, 1, 1, 2, 4, 8]), st.integers(1, 1000),
    st.sampled_from([(), ("T4",), ("V100",)]), st.floats(0.01, 1.0),
)


def test_definition_on_a_hand_worked_node() -> None:
    # free: 1000, 600, 300, 0; 8 cores free
    free, cpu = [1000, 600, 300, 0], 8000
    assert pod_fragmentation(cpu, "T4", free, TP(1000, 1, 500)) == 300  # the 300 is too small
    assert pod_fragmentation(cpu, "T4", free, TP(1000, 1, 1000)) == 900  # partial GPUs
    assert pod_fragmentation(cpu, "T4", free, TP(1000, 2, 1000)) == 1900  # cannot run at all
    assert pod_fragmentation(cpu, "T4", free, TP(9000, 1, 100)) == 1900  # CPU short
    assert pod_fragmentation(cpu, "T4", free, TP(1000, 1, 100, frozenset({"V100"}))) == 1900
    assert pod_fragmentation(cpu, "T4", free, TP(1000)) == 0
    workload = (TP(1000, 1, 500, weight=0.5), TP(1000, 1, 1000, weight=0.5))
    assert node_fragmentation(cpu, "T4", free, workload) == 600


@settings(max_examples=80, deadline=None)
@given(workload=st.lists(typical, min_size=1, max_size=8),
       rows=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 20000),
                               st.lists(st.integers(0, 1000), min_size=1, max_size=8)),
                     min_size=1, max_size=6))
def test_table_equals_the_definition(workload: list[TP],
                                     rows: list[tuple[int, int, list[int]]]) -> None:
    table = FragTable(workload, MODELS)
    g = max(len(r[2]) for r in rows)
    free = np.zeros((len(rows), g), dtype=np.int64)
    for i, (_, _, gpus) in enumerate(rows):
        free[i, : len(gpus)] = gpus
    model = np.array([m for m, _, _ in rows], dtype=np.int64)
    cpu = np.array([c for _, c, _ in rows], dtype=np.int64)
    got = table.expected(*table.stats(free), model, cpu)
    for i, (m, c, gpus) in enumerate(rows):
        assert abs(got[i] - node_fragmentation(c, MODELS[m], gpus, workload)) < 1e-6


def test_typical_pods_cover_the_workload_by_popularity() -> None:
    pods = [PodRequest(f"a{i}", cpu_milli=1000, gpu_count=1, gpu_milli=500) for i in range(90)]
    pods += [PodRequest(f"b{i}", cpu_milli=2000) for i in range(8)]
    pods += [PodRequest(f"c{i}", cpu_milli=3000, gpu_count=8, gpu_milli=1000) for i in range(2)]
    shapes = typical_pods(pods, coverage=0.95)
    assert [(t.cpu_milli, t.gpu_count, t.weight) for t in shapes] == [(1000, 1, 0.9),
                                                                     (2000, 0, 0.08)]


@settings(max_examples=40, deadline=None)
@given(frees=st.lists(st.lists(st.integers(1, 1000), min_size=4, max_size=4), min_size=1,
                      max_size=4),
       milli=st.integers(50, 1000), cpu=st.integers(0, 8000),
       workload=st.lists(typical, min_size=1, max_size=5))
def test_fgd_takes_a_placement_of_least_fragmentation_increase(
    frees: list[list[int]], milli: int, cpu: int, workload: list[TP]
) -> None:
    nodes = tuple(Node(f"n{i}", 16000, 64000, tuple(GPU(j, "T4") for j in range(4)))
                  for i in range(len(frees)))
    running = tuple(Running(f"r{i}-{j}", f"n{i}", gpus=(GpuShare(j, 1000 - f),))
                    for i, row in enumerate(frees) for j, f in enumerate(row) if f < 1000)
    pod = PodRequest("p", cpu_milli=cpu, gpu_count=1, gpu_milli=milli)
    snap = Snapshot(nodes=nodes, running=running, gangs=(Gang("g", "t", (pod,)),),
                    policy=SolverPolicy(typical_pods=tuple(workload)))

    def increase(i: int, j: int) -> float:
        after = list(frees[i])
        after[j] -= milli
        return (node_fragmentation(16000 - cpu, "T4", after, workload)
                - node_fragmentation(16000, "T4", frees[i], workload))

    options = [(increase(i, j), i, j) for i, row in enumerate(frees)
               for j, f in enumerate(row) if f >= milli]
    plan = place(snap, "fgd")
    if not options:
        assert plan.admitted == ()
        return
    chosen = plan.admitted[0].pods[0]
    i, j = int(chosen.node[1:]), chosen.gpus[0].index
    assert abs(increase(i, j) - min(o[0] for o in options)) < 1e-6
