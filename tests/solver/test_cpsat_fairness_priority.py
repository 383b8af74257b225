"""Priority with aging decides who goes first; fairness balances tenants of equal value."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, pod, snap, solve

from solver.cpsat.instance import priority_weight
from solver.types import Tenant, Weights


def test_higher_priority_wins_the_last_gpu() -> None:
    s = snap([node("n", gpus=1)], [gang("low", pod()), gang("high", pod(), priority=5)])
    assert admitted(solve(s)) == {"high"}


def test_aging_lets_a_long_wait_win() -> None:
    w = Weights(aging_per_hour=0.5)
    old = gang("old", pod(), wait_seconds=100 * 3600)
    s = snap([node("n", gpus=1)], [old, gang("high", pod(), priority=5)], weights=w)
    assert priority_weight(old, w) > 6
    assert admitted(solve(s)) == {"old"}


def test_fairness_splits_between_tenants() -> None:
    gangs = [gang(f"{t}{i}", pod(), tenant=t) for t in "ab" for i in range(2)]
    s = snap([node("n", gpus=2)], gangs, tenants=(Tenant("a"), Tenant("b")))
    res = solve(s)
    assert {g[0] for g in admitted(res)} == {"a", "b"}
    assert res.terms["fairness"] > 0


def test_weights_tilt_the_split() -> None:
    gangs = [gang(f"{t}{i}", pod(), tenant=t) for t in "ab" for i in range(4)]
    s = snap([node("n", gpus=4)], gangs, tenants=(Tenant("a", weight=3.0), Tenant("b")),
             weights=Weights(fairness=5.0))
    got = admitted(solve(s))
    assert sum(g.startswith("a") for g in got) == 3
