"""Allowed models and allowed nodes (selectors, taints, health) decide where a pod may go."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, nodes_of, pod, snap, solve

from solver.cpsat.reasons import deferrals
from solver.types import Taint, Toleration


def test_allowed_models_pick_the_node() -> None:
    s = snap([node("a", model="A100"), node("h", model="H100")],
             [gang("g", pod(models=frozenset({"H100"})))])
    assert nodes_of(solve(s), "g") == ["h"]


def test_no_node_of_the_model_defers_with_a_reason() -> None:
    s = snap([node("a", model="A100")], [gang("g", pod(models=frozenset({"H100"})))])
    res = solve(s)
    assert admitted(res) == set()
    (d,) = deferrals(s, _empty())
    assert "no node with GPU model H100" in d.reason


def test_selector_taint_and_cordon_are_respected() -> None:
    tainted = node("t", taints=(Taint("dedicated", "x"),))
    cordoned = node("c", schedulable=False)
    labelled = node("l", labels={"pool": "x"})
    plain = node("p")
    s = snap([tainted, cordoned, labelled, plain], [
        gang("sel", pod(node_selector={"pool": "x"})),
        gang("tol", pod(gpus=4, tolerations=(Toleration("dedicated", "Equal", "x"),))),
        gang("any", pod(gpus=4)),
    ])
    res = solve(s)
    assert nodes_of(res, "sel") == ["l"]
    assert "c" not in nodes_of(res, "tol") + nodes_of(res, "any")
    assert "t" not in nodes_of(res, "any")


def _empty():  # type: ignore[no-untyped-def]
    from solver.plan import Plan, SolveStats

    return Plan((), (), SolveStats("test", "TEST", 0.0))
