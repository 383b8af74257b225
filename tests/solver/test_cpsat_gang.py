"""Gangs are all or nothing; a multi-GPU pod's GPUs sit on one node."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, nodes_of, pod, snap, solve


def test_a_gang_that_fits_is_admitted_whole() -> None:
    s = snap([node("n1"), node("n2")], [gang("g", pod("a", gpus=4), pod("b", gpus=4))])
    res = solve(s)
    assert admitted(res) == {"g"}
    assert sorted(nodes_of(res, "g")) == ["n1", "n2"]


def test_a_gang_that_does_not_fit_is_not_split() -> None:
    s = snap([node("n1"), node("n2", gpus=2)], [gang("g", pod("a", gpus=4), pod("b", gpus=4))])
    res = solve(s)
    assert admitted(res) == set()


def test_multi_gpu_pod_never_spans_nodes() -> None:
    s = snap([node("n1", gpus=2), node("n2", gpus=2)], [gang("g", pod(gpus=4))])
    assert admitted(solve(s)) == set()


def test_smaller_gangs_fill_what_a_big_one_cannot_use() -> None:
    s = snap([node("n1", gpus=2)], [gang("big", pod(gpus=4)), gang("small", pod(gpus=2))])
    assert admitted(solve(s)) == {"small"}
