"""The timed replay's figure: its bottom panel shows what each window planned over time
(reservations held, gangs backfilled, gangs reclaimed), read from the replay's own record."""

from __future__ import annotations

from dataclasses import replace

from admission.simulate import timed_figure
from solver.simulate.timed import TimedConfig, simulate_timed
from solver.simulate.timed_scenario import Scenario, TimedGang
from solver.types import GPU, MILLI, Gang, Node, PodRequest, Reclaim, SolverPolicy, Tenant


def _gang(name: str, tenant: str) -> Gang:
    return Gang(name=name, tenant=tenant, pods=(
        PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1000, gpu_count=1,
                   gpu_milli=MILLI),))


def _scenario(reclaim: bool) -> Scenario:
    """team-b (quota 0) borrows the only GPU; team-a (quota 1) reclaims it at 1000."""
    return Scenario(
        nodes=(Node(name="n0", cpu_milli=8000, memory_mib=64_000,
                    gpus=(GPU(index=0, model="A100", memory_mib=81_920),)),),
        tenants=(Tenant("team-a", quota_milli=MILLI), Tenant("team-b", quota_milli=0)),
        arrivals=(TimedGang(_gang("b1", "team-b"), 0.0, 5000.0),
                  TimedGang(_gang("a1", "team-a"), 1000.0, 100.0)),
        policy=SolverPolicy(reclaim=Reclaim(enabled=reclaim, min_run_s=300.0)))


def test_the_bottom_panel_shows_reclaims_and_names_who_planned_nothing() -> None:
    config = TimedConfig(policy="cpsat", window_s=5.0, time_limit_s=0.5)
    on = simulate_timed(_scenario(True), replace(config, label="cpsat-reclaim"))
    off = simulate_timed(_scenario(False), replace(config, label="cpsat"))
    fig = timed_figure([on, off])
    panel = fig.axes[4]
    assert panel.get_title().startswith("Planning over time")
    assert "none planned by cpsat" in panel.get_title()
    labels = [t.get_text() for t in panel.get_legend().get_texts()]
    assert "cpsat-reclaim: gangs reclaimed (1)" in labels
    # the reclaim marker sits at the window of the eviction (minute 1000/60), one gang
    (marks,) = [c for c in panel.collections if c.get_label().endswith("reclaimed (1)")]
    assert [tuple(p) for p in marks.get_offsets()] == [(1000.0 / 60, 1.0)]


def test_a_replay_that_planned_nothing_draws_an_empty_panel() -> None:
    off = simulate_timed(_scenario(False), TimedConfig(policy="bestfit", window_s=5.0))
    fig = timed_figure([off])
    panel = fig.axes[4]
    assert panel.get_legend() is None and not panel.lines
    assert "none planned by bestfit" in panel.get_title()
