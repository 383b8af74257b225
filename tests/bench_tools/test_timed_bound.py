"""bench/timed_bound.py: the pool it bounds, the k-th longest wait on cases small enough to
check by hand, and the rank numpy's p99 rests on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

import numpy as np
import pytest

from solver.simulate.generate import generate
from solver.simulate.timed_scenario import TimedGang
from solver.types import Gang, PodRequest


@pytest.fixture(scope="module")
def tb(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("timed_bound")


def gang(name: str, gpus: int, arrival: float, run: float) -> TimedGang:
    pod = PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1024, gpu_count=gpus,
                     gpu_milli=1000, models=frozenset({"A100"}))
    return TimedGang(Gang(name=name, tenant="t", pods=(pod,)), arrival, run)


def test_the_pool_is_the_models_gangs_are_held_to(tb: ModuleType) -> None:
    pool = tb.pool_of(generate(seed=0))
    assert pool.models == {"A100", "H100"} and pool.capacity_milli == 32_000
    assert pool.gangs and all(p.models and p.models <= pool.models
                              for a in pool.gangs for p in a.gang.pods)
    assert len(pool.gangs) < pool.all_gangs


def test_two_gangs_that_each_need_the_whole_pool_take_turns(tb: ModuleType) -> None:
    # a at 0 and b at 10, 100 s each, 8 GPUs of 8: the best order waits 90 s (b after a)
    pool = tb.Pool(frozenset({"A100"}), 8000, (gang("a", 8, 0, 100), gang("b", 8, 10, 100)), 2)
    longest, status = tb.kth_longest_wait_bound(pool, 1)
    assert status == "OPTIMAL" and longest == 89  # 90, less the second given for rounding
    assert tb.kth_longest_wait_bound(pool, 2)[0] == 0  # the other one need not wait
    # with room for both, nothing waits
    roomy = tb.Pool(frozenset({"A100"}), 16000, pool.gangs, 2)
    assert tb.kth_longest_wait_bound(roomy, 1)[0] == 0
    assert tb.kth_longest_wait_bound(pool, 3) == (0.0, "FEWER_GANGS")
    with pytest.raises(ValueError):
        tb.kth_longest_wait_bound(pool, 0)


@pytest.mark.parametrize("n", [2, 10, 100, 110, 119, 131, 140, 1000])
def test_numpys_p99_is_at_least_the_wait_of_that_rank(tb: ModuleType, n: int) -> None:
    waits = np.sort(np.random.default_rng(n).exponential(100.0, n))[::-1]  # longest first
    rank = tb.p99_rank(n)
    assert np.percentile(waits, 99) >= waits[rank - 1]
    assert rank == 1 or np.percentile(waits, 99) <= waits[rank - 2]


def test_a_bound_on_a_later_rank_holds_for_every_earlier_one(tb: ModuleType) -> None:
    assert tb.monotone({1: 0.0, 2: 1844.0, 3: 1242.0}) == {1: 1844.0, 2: 1844.0, 3: 1242.0}
    assert tb.monotone({1: 1944.0, 2: 1436.0, 3: 756.0}) == {1: 1944.0, 2: 1436.0, 3: 756.0}


@pytest.mark.parametrize("argv", [["--seeds", "x"], ["--seeds=-1"], ["--seeds", ""],
                                  ["--time-cap", "0"], ["--time-cap", "nan"],
                                  ["--time-cap", "inf"]])
def test_bad_flags_are_refused_before_anything_runs(tb: ModuleType, argv: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as got:
        tb.main([*argv, "--no-write"])
    assert got.value.code == 2
    assert f"error: {argv[0].split('=')[0]}:" in capsys.readouterr().err  # names the flag


def test_numpys_p99_is_the_weighted_sum_the_node_bound_minimises(tb: ModuleType) -> None:
    for n in (2, 110, 131, 140):
        waits = np.sort(np.random.default_rng(n).exponential(100.0, n))[::-1]
        rank = tb.p99_rank(n)
        w_rank, w_before = tb.p99_weights(n)
        below = (w_rank * waits[rank - 1] + w_before * waits[max(0, rank - 2)]) / 1000
        assert below <= np.percentile(waits, 99) <= below + 0.01 * waits[0]


def test_a_gang_of_whole_node_pods_waits_where_the_pool_as_one_resource_would_not(
        tb: ModuleType) -> None:
    # two 8-GPU A100 nodes; a: two 6-GPU pods, b: one 4-GPU pod, both at 0 for 100 s. As one
    # 16-GPU resource both run at once; on the nodes a leaves 2 + 2, so one of them waits 100 s
    def pods(name: str, *gpus: int) -> tuple[PodRequest, ...]:
        return tuple(PodRequest(name=f"{name}-{i}", cpu_milli=1000, memory_mib=1024,
                                gpu_count=g, gpu_milli=1000, models=frozenset({"A100"}))
                     for i, g in enumerate(gpus))
    a = TimedGang(Gang(name="a", tenant="team-a", pods=pods("a", 6, 6)), 0.0, 100.0)
    b = TimedGang(Gang(name="b", tenant="team-a", pods=pods("b", 4)), 0.0, 100.0)
    base = generate(seed=0)
    a100 = [n for n in base.nodes if n.gpus[0].model == "A100"][:2]
    scenario = replace(base, nodes=tuple(a100), arrivals=(a, b))
    pool = tb.pool_of(scenario)
    assert pool.capacity_milli == 16_000
    assert tb.kth_longest_wait_bound(pool, 1)[0] == 0
    bound, found, status = tb.p99_node_bound(scenario, pool, {}, time_cap_s=10)
    assert status == "OPTIMAL" and found is not None
    assert 97 <= bound <= found <= 99  # p99 of (0, 100) is 99; the bound less the rounding
