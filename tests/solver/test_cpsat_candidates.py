"""Candidate filtering: identical nodes are offered sparingly, yet enough distinct nodes for
every pod, and the greedy hint's nodes are always among them."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, pod, snap, solve

from solver.baselines import place
from solver.cpsat.instance import PER_POD_NODES, make_instance


def test_identical_nodes_are_offered_sparingly() -> None:
    s = snap([node(f"n{i:03d}", gpus=8) for i in range(200)],
             [gang(f"g{i}", pod(milli=300)) for i in range(3)])
    inst = make_instance(s)
    offered = {c.node for cands in inst.candidates for c in cands}
    assert len(offered) <= PER_POD_NODES + 1
    assert admitted(solve(s)) == {"g0", "g1", "g2"}


def test_windows_slide_so_every_pod_finds_a_node() -> None:
    s = snap([node(f"n{i:03d}", gpus=1) for i in range(40)],
             [gang(f"g{i}", pod()) for i in range(30)])
    inst = make_instance(s)
    offered = {c.node for cands in inst.candidates for c in cands}
    assert len(offered) >= 30
    assert len(admitted(solve(s))) == 30


def test_hint_nodes_are_always_offered() -> None:
    s = snap([node(f"n{i:03d}", gpus=4) for i in range(60)],
             [gang(f"g{i}", pod(gpus=2)) for i in range(5)])
    hint = place(s, "random", seed=3)
    inst = make_instance(s, hint=hint)
    for gp in hint.admitted:
        pi = next(i for i, r in enumerate(inst.pods) if inst.gangs[r.gang].name == gp.gang)
        assert gp.pods[0].node in {c.node for c in inst.candidates[pi]}
