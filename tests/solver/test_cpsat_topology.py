"""Topology: required keeps a gang in one domain; preferred penalises spreading."""

from __future__ import annotations

from test_cpsat_cases import admitted, as_plan, gang, node, nodes_of, pod, snap, solve

from solver.cpsat.reasons import deferrals
from solver.types import TopologyMode, TopologyRequirement

RACK = TopologyRequirement("rack", TopologyMode.REQUIRED)


def test_required_rack_picks_the_rack_that_holds_the_gang() -> None:
    s = snap([node("a1", rack="r1"), node("b1", rack="r2"), node("b2", rack="r2")],
             [gang("g", pod("x", gpus=4), pod("y", gpus=4), topology=RACK)])
    assert sorted(nodes_of(solve(s), "g")) == ["b1", "b2"]


def test_required_rack_too_small_defers_with_a_reason() -> None:
    s = snap([node("a1", rack="r1"), node("b1", rack="r2")],
             [gang("g", pod("x", gpus=4), pod("y", gpus=4), topology=RACK)])
    res = solve(s)
    assert admitted(res) == set()
    (d,) = deferrals(s, as_plan(res))
    assert d.reason.startswith("topology domain too small: no rack domain has 8000")


def test_required_nvlink_keeps_gpus_in_one_island() -> None:
    # nodes have NVLink pairs (0,1) and (2,3); GPUs 0 and 2 are taken
    from test_cpsat_cases import running

    req = TopologyRequirement("nvlink", TopologyMode.REQUIRED)
    s = snap([node("n", gpus=4)], [gang("g", pod(gpus=2), topology=req)],
             run=(running("r", "n", (0, 1000), (2, 1000)),))
    assert admitted(solve(s)) == set()
    s = snap([node("n", gpus=4)], [gang("g", pod(gpus=2), topology=req)],
             run=(running("r", "n", (0, 1000), (1, 1000)),))
    res = solve(s)
    assert res.admitted is not None
    assert sorted(x.index for x in res.admitted[0].pods[0].gpus) == [2, 3]


def test_preferred_rack_stays_together_when_it_can() -> None:
    pref = TopologyRequirement("rack", TopologyMode.PREFERRED)
    s = snap([node("a1", rack="r1"), node("b1", rack="r2"), node("a2", rack="r1")],
             [gang("g", pod("x", gpus=4), pod("y", gpus=4), topology=pref)])
    assert sorted(nodes_of(solve(s), "g")) == ["a1", "a2"]


def test_preferred_rack_spreads_rather_than_waits() -> None:
    pref = TopologyRequirement("rack", TopologyMode.PREFERRED)
    s = snap([node("a1", rack="r1"), node("b1", rack="r2")],
             [gang("g", pod("x", gpus=4), pod("y", gpus=4), topology=pref)])
    res = solve(s)
    assert admitted(res) == {"g"}
    assert res.terms["topology"] < 0
