"""Capacity: milli-GPU and GPU memory per GPU, CPU and memory per node, after running pods."""

from __future__ import annotations

from test_cpsat_cases import admitted, gang, node, pod, running, snap, solve


def test_two_halves_share_one_gpu() -> None:
    s = snap([node("n1", gpus=1)], [gang("a", pod(milli=500)), gang("b", pod(milli=500))])
    res = solve(s)
    assert admitted(res) == {"a", "b"}


def test_a_third_half_does_not_fit() -> None:
    s = snap([node("n1", gpus=1)], [gang(x, pod(milli=500)) for x in "abc"])
    assert len(admitted(solve(s))) == 2


def test_running_pods_take_capacity() -> None:
    s = snap([node("n1", gpus=1)], [gang("a", pod(milli=600))],
             run=(running("r", "n1", (0, 500)),))
    assert admitted(solve(s)) == set()


def test_whole_gpu_needs_an_untouched_gpu() -> None:
    s = snap([node("n1", gpus=2)], [gang("a", pod(gpus=2))], run=(running("r", "n1", (0, 100)),))
    assert admitted(solve(s)) == set()
    s = snap([node("n1", gpus=3)], [gang("a", pod(gpus=2))], run=(running("r", "n1", (0, 100)),))
    assert admitted(solve(s)) == {"a"}


def test_node_cpu_limits_pods() -> None:
    s = snap([node("n1", gpus=4, cpu=2000)], [gang(x, pod(cpu_milli=1500)) for x in "ab"])
    assert len(admitted(solve(s))) == 1


def test_node_memory_limits_pods() -> None:
    s = snap([node("n1", gpus=4, mem=3000)], [gang(x, pod(memory_mib=2000)) for x in "ab"])
    assert len(admitted(solve(s))) == 1


def test_gpu_memory_limits_sharing() -> None:
    # 300 milli each fits three to a GPU by compute, but 30 GB each only once into 40 GB
    s = snap([node("n1", gpus=1)], [gang(x, pod(milli=300, gpu_memory_mib=30000)) for x in "ab"])
    assert len(admitted(solve(s))) == 1
