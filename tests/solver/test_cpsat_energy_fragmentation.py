"""Energy prefers GPUs already awake; fragmentation prefers filling partly used GPUs."""

from __future__ import annotations

from test_cpsat_cases import gang, node, pod, running, snap, solve

from solver.cpsat.fragmentation import FragmentTable
from solver.types import Weights


def _gpu(res, name: str = "g") -> tuple[str, int]:  # type: ignore[no-untyped-def]
    gp = next(g for g in res.admitted if g.gang == name)
    return gp.pods[0].node, gp.pods[0].gpus[0].index


def test_fragment_table_counts_unusable_leftovers() -> None:
    f = FragmentTable([500, 500, 1000, 250])
    assert f(1000) == 0
    assert f(400) == 400 * 3 / 4  # only the 250 task fits
    assert f(0) == 0


def test_small_pod_fills_a_partly_used_gpu() -> None:
    s = snap([node("idle", gpus=1), node("busy", gpus=1)], [gang("g", pod(milli=500))],
             run=(running("r", "busy", (0, 500)),))
    assert _gpu(solve(s)) == ("busy", 0)


def test_energy_alone_prefers_an_awake_gpu() -> None:
    w = Weights(fragmentation=0.0, energy=1.0)
    s = snap([node("idle", gpus=1), node("busy", gpus=1)], [gang("g", pod(milli=200))],
             run=(running("r", "busy", (0, 300)),), weights=w)
    res = solve(s)
    assert _gpu(res) == ("busy", 0)
    assert res.terms.get("energy", 0) == 0


def test_fragmentation_alone_avoids_leaving_a_sliver() -> None:
    # a 400 pod on the GPU with 700 free leaves 300, too small for any pod of the window; on
    # the idle GPU it leaves 600, which the 600 pods of the window can still use
    w = Weights(fragmentation=1.0, energy=0.0, fairness=0.0)
    s = snap([node("a", gpus=1), node("b", gpus=1)],
             [gang("g", pod(milli=400)), gang("big1", pod(milli=600, models=frozenset({"X"}))),
              gang("big2", pod(milli=600, models=frozenset({"X"})))],
             run=(running("r", "a", (0, 300)),), weights=w)
    assert _gpu(solve(s)) == ("b", 0)
