"""The free-capacity arrays the CP-SAT path builds once per solve: the vectorised construction
agrees with :func:`solver.state.free_capacity` (the plain per-node derivation), and a copy is
independent of its original (the greedy hint places into a copy, the model reads the original).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.baselines import ClusterArrays
from solver.rules import sharing_problem
from solver.state import free_capacity
from solver.types import GPU, Node, PodRequest, Snapshot
from tests.solver.test_cpsat_random import snapshots


@st.composite
def renumbered(draw: st.DrawFn) -> Snapshot:
    """Snapshots whose GPU indexes are sometimes not 0..k-1 in order (e.g. 7, 3, 5)."""
    s = draw(snapshots())
    if not draw(st.booleans()):
        return s
    nodes, remap = [], {}
    for n in s.nodes:
        perm = draw(st.permutations(range(len(n.gpus))))
        offset = draw(st.sampled_from((0, 3)))
        gpus = []
        for g, p in zip(n.gpus, perm, strict=True):
            remap[(n.name, g.index)] = p + offset
            gpus.append(GPU(p + offset, g.model, g.memory_mib, g.nvlink_domain))
        nodes.append(replace(n, gpus=tuple(gpus)))
    running = tuple(replace(r, gpus=tuple(replace(sh, index=remap[(r.node, sh.index)])
                                          for sh in r.gpus)) for r in s.running)
    return replace(s, nodes=tuple(nodes), running=running)


def _expected(s: Snapshot, a: ClusterArrays) -> None:
    free = free_capacity(s)
    for i, n in enumerate(s.nodes):
        f = free[n.name]
        assert (a.cpu[i], a.mem[i]) == (f.cpu_milli, f.memory_mib)
        assert a.gpu_count[i] == len(n.gpus) == int(a.gexists[i].sum())
        for slot, g in enumerate(n.gpus):
            assert a.gindex[i, slot] == g.index
            assert a.models[a.gmodel[i, slot]] == g.model
            assert a.gfree[i, slot] == f.gpu_milli[g.index]
            assert a.gmem[i, slot] == f.gpu_memory_mib[g.index]
            assert a.gmem_total[i, slot] == g.memory_mib
            held = [r.qos_class for r in s.running if r.node == n.name
                    for sh in r.gpus if sh.index == g.index]
            assert sorted(map(str, a.classes.get((i, slot), []))) == sorted(map(str, held))
            constrained = any(a._constrained(c) for c in held)
            assert ((i, slot) in a.constrained_slots) == constrained
    # equal state ids exactly for nodes in equal states
    for i in range(len(s.nodes)):
        for j in range(len(s.nodes)):
            same = (a.cpu[i] == a.cpu[j] and a.mem[i] == a.mem[j]
                    and a.node_model[i] == a.node_model[j]
                    and (a.gfree[i] == a.gfree[j]).all() and (a.gmem[i] == a.gmem[j]).all()
                    and (a.gmodel[i] == a.gmodel[j]).all())
            assert (a.state_id[i] == a.state_id[j]) == bool(same)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(renumbered())
def test_arrays_equal_the_checkers_free_capacity(s: Snapshot) -> None:
    _expected(s, ClusterArrays(s))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_copy_is_independent_and_equal(s: Snapshot) -> None:
    a = ClusterArrays(s)
    a.fragmentation()
    before = {k: getattr(a, k).copy() for k in ("cpu", "mem", "gfree", "gmem", "state_id")}
    classes = {k: list(v) for k, v in a.classes.items()}
    c = a.copy()
    for k, v in before.items():
        assert np.array_equal(getattr(c, k), v)
    assert c.classes == classes and c.constrained_slots == a.constrained_slots
    pod = PodRequest("x", 100, 100, 1, 200, qos_class="solo")
    rows = np.nonzero(c.gpu_fits(pod, c.node_fits(pod)).any(axis=1))[0]
    if len(rows):
        row = int(rows[0])
        slot = int(np.nonzero(c.gpu_fits(pod, c.node_fits(pod))[row])[0][0])
        c.apply(row, pod, [slot])
        assert c.gfree[row, slot] == before["gfree"][row, slot] - 200
        assert "solo" in c.classes[(row, slot)] and (row, slot) in c.constrained_slots
    for k, v in before.items():  # the original is untouched
        assert np.array_equal(getattr(a, k), v)
    assert a.classes == classes
    assert a.node_frag is not None and c.node_frag is not None


def test_sharing_problem_still_consulted_for_constrained_slots() -> None:
    # a GPU holding an exclusive pod bans any newcomer; the arrays drop it from gpu_fits
    from solver.types import GpuShare, QoSProfile, Running, SolverPolicy
    policy = SolverPolicy(qos_classes=(QoSProfile("solo", exclusive=True),))
    s = Snapshot((Node("n", 8000, 8000, (GPU(0, "A100"), GPU(1, "A100"))),), (),
                 (Running("r", "n", 1, 1, (GpuShare(0, 100),), qos_class="solo"),),
                 policy=policy)
    a = ClusterArrays(s)
    pod = PodRequest("x", 100, 100, 1, 200)
    assert sharing_problem(policy, ["solo", None]) is not None
    assert a.gpu_fits(pod, a.node_fits(pod)).tolist() == [[False, True]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_greedy_hint_on_shared_arrays_is_the_best_fit_plan(s: Snapshot) -> None:
    from solver.baselines import place
    from solver.cpsat.solve import greedy_hint
    a = ClusterArrays(s)
    gfree = a.gfree.copy()
    hint = greedy_hint(s, a, seed=3)
    ref = place(s, "bestfit", seed=3)
    assert hint.admitted == ref.admitted and hint.deferred == ref.deferred
    assert np.array_equal(a.gfree, gfree)  # placed into a copy
