"""Interference: classes that may not share a GPU, and latency SLOs of co-located pods."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, pod, running, snap, solve

from solver.types import QoSProfile, SolverPolicy


def test_banned_classes_do_not_share_a_gpu() -> None:
    s = snap([node("n", gpus=1)], [gang("serve", pod(milli=400, qos_class="latency-inference")),
                                   gang("train", pod(milli=400, qos_class="training"))])
    assert len(admitted(solve(s))) == 1


def test_banned_class_stays_off_a_gpu_where_it_runs() -> None:
    s = snap([node("n", gpus=1)], [gang("serve", pod(milli=400, qos_class="latency-inference"))],
             run=(running("t", "n", (0, 500), qos="training"),))
    assert admitted(solve(s)) == set()


def test_exclusive_class_gets_a_gpu_of_its_own() -> None:
    pol = SolverPolicy(qos_classes=(QoSProfile("solo", exclusive=True),))
    s = snap([node("n", gpus=2)], [gang(x, pod(milli=300, qos_class="solo")) for x in "abc"],
             policy=pol)
    assert len(admitted(solve(s))) == 2


def test_slo_limits_how_many_share() -> None:
    tight = QoSProfile("tight", sm=0.5, membw=0.5, latency_sensitive=True,
                       solo_latency_ms=10.0, slo_ms=10.5)
    pol = SolverPolicy(qos_classes=(tight,))
    s = snap([node("n", gpus=1)], [gang(x, pod(milli=200, qos_class="tight")) for x in "ab"],
             policy=pol)
    assert len(admitted(solve(s))) == 1
    loose = QoSProfile("loose", sm=0.1, membw=0.1, latency_sensitive=True,
                       solo_latency_ms=10.0, slo_ms=100.0)
    s = snap([node("n", gpus=1)], [gang(x, pod(milli=200, qos_class="loose")) for x in "abc"],
             policy=SolverPolicy(qos_classes=(loose,)))
    assert len(admitted(solve(s))) == 3
