"""span_figures: the real-cluster replay's figures mean what the timed simulator's mean.

e2e/bench_compare.py reports utilisation and fair shares of runs on a real control plane
through :func:`solver.simulate.metrics.span_figures`; these tests hold it to the simulator's own
integrals on the same outcomes, and to hand-worked cases.
"""

from __future__ import annotations

import pytest

from solver.simulate.generate import generate
from solver.simulate.metrics import PodSpan, span_figures
from solver.simulate.timed import TimedConfig, simulate_timed


@pytest.mark.parametrize("policy", ["bestfit", "random"])
def test_the_simulators_outcomes_give_the_simulators_figures(policy: str) -> None:
    scenario = generate(seed=1)
    result = simulate_timed(scenario, TimedConfig(policy=policy, window_s=5, time_limit_s=0.5,
                                                  seed=1))
    gangs = {a.gang.name: a.gang for a in scenario.arrivals}
    spans = [PodSpan(o.tenant, sum(p.gpu_count * p.gpu_milli for p in gangs[o.gang].pods),
                     o.arrival_s, o.start_s, o.end_s) for o in result.outcomes]
    figures = span_figures(spans, capacity_milli=scenario.gpu_capacity_milli,
                           weights={t.name: t.weight for t in scenario.tenants},
                           cutoff_s=scenario.arrivals[-1].arrival_s)
    assert figures.mean_utilisation == pytest.approx(result.mean_utilisation, rel=1e-9)
    for t in result.tenants:
        assert figures.held_milli_s[t.tenant] / 1000 == pytest.approx(t.gpu_seconds, rel=1e-9)
        assert figures.fair_milli_s[t.tenant] / 1000 == pytest.approx(t.fair_gpu_seconds,
                                                                      rel=1e-9)
        assert figures.fair_ratio(t.tenant) == pytest.approx(t.fair_ratio, rel=1e-9)
    assert figures.jain == pytest.approx(result.jain, rel=1e-9)


def test_a_tenant_kept_waiting_while_another_holds_everything() -> None:
    # 2 GPUs; a holds both from 0 to 10; b asks for one from 0 and starts only at 10.
    spans = [PodSpan("a", 2000, 0, 0, 10), PodSpan("b", 1000, 0, 10, None)]
    f = span_figures(spans, capacity_milli=2000, weights={"a": 1, "b": 1}, cutoff_s=10)
    assert f.mean_utilisation == pytest.approx(1.0)
    assert f.held_milli_s == {"a": 20000, "b": 0}
    assert f.fair_milli_s == {"a": 10000, "b": 10000}  # one GPU each was fair
    assert f.fair_ratio("a") == pytest.approx(2.0)
    assert f.fair_ratio("b") == 0.0


def test_nothing_after_the_cutoff_counts_and_unknown_tenants_are_refused() -> None:
    f = span_figures([PodSpan("a", 1000, 5, 20, 30)], capacity_milli=1000,
                     weights={"a": 1}, cutoff_s=10)
    assert f.held_milli_s["a"] == 0 and f.mean_utilisation == 0
    assert f.fair_milli_s["a"] == pytest.approx(5000)  # it waited from 5 to the cutoff
    with pytest.raises(ValueError, match="unknown tenant"):
        span_figures([PodSpan("x", 1, 0, 0, 1)], capacity_milli=1, weights={"a": 1},
                     cutoff_s=1)
