"""The timed replay: hand-checked clocks and integrals, conservation, determinism, the checker
on every plan, and interference-aware against interference-oblivious placement."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.checker import check
from solver.interference import resolve_profiles, slowdown
from solver.plan import GangPlacement, Plan, PodPlacement, SolveStats
from solver.simulate.generate import ClusterSpec, GeneratorSpec, WorkloadSpec, generate
from solver.simulate.timed import (
    SimulationError,
    TimedConfig,
    TimedResult,
    _take_pending,
    default_solve,
    oblivious_policy,
    simulate_timed,
)
from solver.simulate.timed_scenario import (
    Scenario,
    TimedGang,
    TracePod,
    scenario_from_trace,
    tenant_by_hash,
)
from solver.types import (
    GPU,
    MILLI,
    Gang,
    GpuShare,
    LearnedRuntimes,
    Node,
    PodRequest,
    ProblemError,
    Snapshot,
    SolverPolicy,
    Tenant,
)


def _node(name: str = "n0", gpus: int = 1) -> Node:
    return Node(name=name, cpu_milli=64_000, memory_mib=256_000,
                gpus=tuple(GPU(index=i, model="A100", memory_mib=40_000) for i in range(gpus)))


def _gang(name: str, *, tenant: str = "team-a", milli: int = MILLI, qos: str | None = None
          ) -> Gang:
    return Gang(name=name, tenant=tenant,
                pods=(PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1024,
                                 gpu_count=1, gpu_milli=milli, qos_class=qos),))


WATTS = SolverPolicy(idle_watts={"A100": 100.0}, active_watts={"A100": 300.0})


def test_a_gang_waits_across_windows_until_capacity_frees() -> None:
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"),),
        arrivals=(TimedGang(_gang("g1"), 0.0, 100.0), TimedGang(_gang("g2"), 1.0, 100.0)),
        policy=WATTS,
    )
    r = simulate_timed(sc, TimedConfig(policy="firstfit", window_s=5.0))
    by = {o.gang: o for o in r.outcomes}
    # g1 is solved in the window ending at 0; g2 waits from 1 until g1 leaves at 100
    assert (by["g1"].start_s, by["g1"].end_s) == (0.0, 100.0)
    assert (by["g2"].start_s, by["g2"].end_s) == (100.0, 200.0)
    assert by["g2"].wait_s == 99.0
    assert r.end_s == 200.0 and r.count("departed") == 2
    # one GPU busy for 200 s at 300 W
    assert r.energy_kwh == pytest.approx(300 * 200 / 3.6e6)
    assert r.mean_utilisation == pytest.approx(1.0)
    assert r.jain == pytest.approx(1.0)
    # solved at 0, 5 (g2 does not fit) and 100; windows with nothing new are skipped
    assert r.solves == 3


def test_windows_batch_arrivals_and_wait_counts_from_arrival() -> None:
    sc = Scenario(
        nodes=(_node(gpus=2),),
        tenants=(Tenant("team-a"),),
        arrivals=(TimedGang(_gang("g1"), 1.0, 50.0), TimedGang(_gang("g2"), 7.0, 50.0)),
        policy=WATTS,
    )
    r = simulate_timed(sc, TimedConfig(policy="bestfit", window_s=10.0))
    assert [o.start_s for o in r.outcomes] == [10.0, 10.0]
    assert sorted(r.waits_s) == [3.0, 9.0]
    assert r.solves == 1


def test_fair_share_and_jain_on_two_tenants_sharing_one_gpu() -> None:
    # team-a holds the only GPU for 100 s while team-b waits; then team-b runs 100 s alone
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"), Tenant("team-b")),
        arrivals=(TimedGang(_gang("a1"), 0.0, 100.0),
                  TimedGang(_gang("b1", tenant="team-b"), 0.0, 100.0)),
        policy=WATTS,
    )
    r = simulate_timed(sc, TimedConfig(policy="firstfit", window_s=5.0))
    t = {x.tenant: x for x in r.tenants}
    assert t["team-a"].gpu_seconds == pytest.approx(100) and t["team-b"].gpu_seconds == 100
    # 0..100: both ask for one GPU -> fair is half each; 100..200 team-b alone -> all to it
    assert t["team-a"].fair_gpu_seconds == pytest.approx(50)
    assert t["team-b"].fair_gpu_seconds == pytest.approx(150)
    assert t["team-a"].fair_ratio == pytest.approx(2.0)
    assert t["team-b"].fair_ratio == pytest.approx(100 / 150)
    assert r.jain == pytest.approx((2 + 2 / 3) ** 2 / (2 * (4 + 4 / 9)))
    assert [x.share for x in r.tenants] == pytest.approx([0.5, 0.5])


def test_fairness_is_judged_over_the_arrival_period() -> None:
    # a1 holds the only GPU from 0 to 100; b1 waits from 20; a2 arrives last, at 60
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"), Tenant("team-b")),
        arrivals=(TimedGang(_gang("a1"), 0.0, 100.0),
                  TimedGang(_gang("b1", tenant="team-b"), 20.0, 100.0),
                  TimedGang(_gang("a2"), 60.0, 10.0)),
        policy=WATTS,
    )
    r = simulate_timed(sc, TimedConfig(policy="firstfit", window_s=5.0))
    t = {x.tenant: x for x in r.tenants}
    # over 0..60: team-a got 60 GPU-s; fair is all of it until 20, then half each
    assert t["team-a"].gpu_seconds == pytest.approx(60) and t["team-b"].gpu_seconds == 0
    assert t["team-a"].fair_gpu_seconds == pytest.approx(40)
    assert t["team-b"].fair_gpu_seconds == pytest.approx(20)
    assert r.jain == pytest.approx(1.5**2 / (2 * 1.5**2))
    assert r.count("departed") == 3  # the replay itself still runs to the end


def test_serving_next_to_training_counts_as_missed_only_when_oblivious() -> None:
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"),),
        arrivals=(
            TimedGang(_gang("serve", milli=300, qos="latency-inference"), 0.0, 100.0),
            TimedGang(_gang("tune", milli=500, qos="training"), 10.0, 40.0),
        ),
        policy=WATTS,
    )
    blind = simulate_timed(sc, TimedConfig(policy="firstfit", interference_aware=False))
    # the fine-tuning run joins the serving pod's GPU at 10 and leaves at 50
    assert blind.slo.pods == 1 and blind.slo.pod_seconds == pytest.approx(100)
    assert blind.slo.ban_miss_s == pytest.approx(40)
    assert blind.slo.attainment == pytest.approx(0.6)
    assert blind.slo.pods_always_met == 0
    profiles = resolve_profiles(())
    serve, tune = profiles["latency-inference"], profiles["training"]
    together = slowdown(serve, [tune])
    # serving alone 0..10 and 50..100, next to training 10..50; training 40 s next to serving
    assert blind.slo.mean_latency_ms == pytest.approx(20.0 * (60 + 40 * together) / 100)
    assert blind.slo.mean_slowdown == pytest.approx(
        (60 + 40 * together + 40 * slowdown(tune, [serve])) / 140)
    aware = simulate_timed(sc, TimedConfig(policy="firstfit"))
    by = {o.gang: o for o in aware.outcomes}
    assert by["tune"].start_s == 100.0  # waits for the GPU to be free of serving
    assert aware.slo.attainment == 1.0 and aware.slo.pods_always_met == 1


def test_oblivious_policy_hides_every_class_and_the_interference_weight() -> None:
    blind = oblivious_policy(SolverPolicy())
    profiles = resolve_profiles(blind.qos_classes)
    assert set(profiles) >= {"training", "latency-inference"}
    assert all(p.sm == 0 and p.membw == 0 and not p.no_share_with and not p.latency_sensitive
               for p in profiles.values())
    assert blind.weights.interference == 0
    # under it the checker lets serving and training share
    node = _node()
    gangs = (_gang("s", milli=300, qos="latency-inference"), _gang("t", milli=500, qos="training"))
    plan = Plan(
        tuple(GangPlacement(g.name, (PodPlacement(g.pods[0].name, "n0",
                                                  (GpuShare(0, g.pods[0].gpu_milli),)),))
              for g in gangs),
        (), SolveStats("test", "GREEDY", 0.0),
    )
    assert check(Snapshot(nodes=(node,), gangs=gangs, policy=blind), plan) == []
    assert check(Snapshot(nodes=(node,), gangs=gangs), plan) != []


def test_a_plan_the_checker_rejects_stops_the_replay() -> None:
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"),),
        arrivals=(TimedGang(_gang("g1"), 0.0, 100.0), TimedGang(_gang("g2"), 0.0, 100.0)),
    )

    def everything_on_gpu_0(snapshot: Snapshot) -> Plan:
        return Plan(
            tuple(GangPlacement(g.name, (PodPlacement(g.pods[0].name, "n0",
                                                      (GpuShare(0, MILLI),)),))
                  for g in snapshot.gangs),
            (), SolveStats("broken", "GREEDY", 0.0),
        )

    with pytest.raises(SimulationError, match="capacity"):
        simulate_timed(sc, TimedConfig(policy="broken"), solve=everything_on_gpu_0)


def test_take_pending_interleaves_tenants_oldest_first() -> None:
    from collections import deque

    q = {
        "team-a": deque(TimedGang(_gang(f"a{i}"), float(i), 1.0) for i in range(5)),
        "team-b": deque([TimedGang(_gang("b0", tenant="team-b"), 2.5, 1.0)]),
    }
    assert [t.gang.name for t in _take_pending(q, 4)] == ["a0", "b0", "a1", "a2"]


# --------------------------------------------------------------------------------------------
# Generated scenarios through the real policies
# --------------------------------------------------------------------------------------------

SMALL = GeneratorSpec(
    cluster=ClusterSpec(racks=2, nodes_per_rack=3, tainted=1, cordoned=1),
    workload=WorkloadSpec(horizon_s=900.0, load=1.4),
)


@pytest.mark.parametrize("policy", ["firstfit", "bestfit", "fgd", "random"])
def test_conservation_every_gang_is_started_or_waiting_none_lost(policy: str) -> None:
    sc = generate(SMALL, seed=11)
    r = simulate_timed(sc, TimedConfig(policy=policy, seed=3))
    names = [o.gang for o in r.outcomes]
    assert sorted(names) == sorted(a.gang.name for a in sc.arrivals)
    assert {o.state for o in r.outcomes} <= {"departed", "waiting"}  # the clock ran out
    for o in r.outcomes:
        if o.start_s is not None:
            assert o.start_s >= o.arrival_s and o.start_s % 5.0 == 0
    assert all(0.0 <= v <= 1.0 + 1e-9 for _, v in r.utilisation)
    assert r.utilisation[-1][1] == pytest.approx(0.0)  # everything that started has left
    # interference-aware placement never breaks an SLO or a ban (the checker enforces both)
    assert r.slo.attainment == 1.0


def test_until_stops_the_clock_and_still_accounts_for_every_arrival() -> None:
    sc = generate(SMALL, seed=5)
    r = simulate_timed(sc, TimedConfig(policy="bestfit", until_s=300.0))
    arrived = [a.gang.name for a in sc.arrivals if a.arrival_s <= 300.0]
    assert sorted(o.gang for o in r.outcomes) == sorted(arrived)
    assert r.end_s == 300.0
    assert r.count("running") + r.count("departed") + r.count("waiting") == len(arrived)
    assert all(o.end_s is None or o.state == "running" or o.end_s <= 300.0 for o in r.outcomes)


def test_same_seed_same_replay() -> None:
    sc = generate(SMALL, seed=2)
    runs = [simulate_timed(sc, TimedConfig(policy="random", seed=9)) for _ in range(2)]
    a, b = (dict(r.summary()) for r in runs)
    for d in (a, b):
        d.pop("solve_seconds")
    assert a == b
    assert runs[0].outcomes == runs[1].outcomes


@pytest.mark.slow
def test_cpsat_replay_is_checker_clean_deterministic_and_interference_aware() -> None:
    sc = generate(GeneratorSpec(workload=WorkloadSpec(horizon_s=600.0, load=1.4)), seed=1)
    cfg = TimedConfig(policy="cpsat", time_limit_s=1.0, seed=0)
    first = simulate_timed(sc, cfg)
    assert first.slo.attainment == 1.0
    assert sorted(o.gang for o in first.outcomes) == sorted(a.gang.name for a in sc.arrivals)
    blind = simulate_timed(sc, replace(cfg, interference_aware=False))
    assert blind.slo.attainment <= first.slo.attainment
    again = simulate_timed(sc, cfg)  # CP-SAT runs under a deterministic time budget
    assert again.outcomes == first.outcomes


def test_config_and_scenario_errors_name_the_field() -> None:
    with pytest.raises(ProblemError, match="window_s"):
        TimedConfig(window_s=0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ProblemError, match="settle_s"):
            TimedConfig(settle_s=bad)
    with pytest.raises(ProblemError, match="arrival_s"):
        TimedGang(_gang("g"), -1.0, 1.0)
    with pytest.raises(ProblemError, match="duration_s"):
        TimedGang(_gang("g"), 0.0, 0.0)
    with pytest.raises(ProblemError, match="tenant"):
        Scenario(nodes=(_node(),), tenants=(Tenant("team-b"),),
                 arrivals=(TimedGang(_gang("g"), 0.0, 1.0),))
    with pytest.raises(ProblemError, match="time order"):
        Scenario(nodes=(_node(),), tenants=(Tenant("team-a"),),
                 arrivals=(TimedGang(_gang("g"), 5.0, 1.0), TimedGang(_gang("h"), 1.0, 1.0)))
    with pytest.raises(ProblemError,
                       match="policy: must be one of cpsat, fgd, bestfit, firstfit, random, "
                             "kueue, volcano, got"):
        simulate_timed(generate(SMALL), TimedConfig(policy="nope"))


def test_trace_pods_become_hashed_tenants_with_durations() -> None:
    pods = [
        TracePod("openb-pod-0001", 6000, 12288, 1, 460, frozenset(), "LS", 100, 700),
        TracePod("openb-pod-0000", 12000, 16384, 8, 1000, frozenset({"V100M32"}), "BE", 0, 50),
        TracePod("openb-pod-0002", 1000, 1024, 0, 0, frozenset(), "BE", 20, 20),
    ]
    sc = scenario_from_trace((_node(gpus=8),), pods, tenants=3, time_scale=0.5)
    assert [a.gang.name for a in sc.arrivals] == ["openb-pod-0000", "openb-pod-0002",
                                                   "openb-pod-0001"]
    a0, a2, a1 = sc.arrivals
    assert (a1.arrival_s, a1.duration_s) == (50.0, 300.0)
    assert a2.duration_s == 1.0  # zero-length pods still run a second
    assert a1.gang.pods[0].qos_class == "latency-inference"
    assert a0.gang.pods[0].qos_class == "training"
    assert a2.gang.pods[0].qos_class is None
    assert {a.gang.tenant for a in sc.arrivals} <= {"team-a", "team-b", "team-c"}
    # CRC-32 spreads names evenly and never changes between runs
    counts = {t: 0 for t in ("team-a", "team-b", "team-c")}
    for i in range(3000):
        counts[tenant_by_hash(f"openb-pod-{i:04d}", 3)] += 1
    assert all(800 < c < 1200 for c in counts.values())
    assert tenant_by_hash("openb-pod-0000", 4) == "team-a"
    with pytest.raises(ProblemError, match="deletion_time"):
        scenario_from_trace((_node(),), [replace(pods[0], deletion_time=1)])



@st.composite
def _scenarios(draw: st.DrawFn) -> Scenario:
    nodes = tuple(_node(f"n{i}", gpus=draw(st.integers(1, 4)))
                  for i in range(draw(st.integers(1, 3))))
    tenants = ("team-a", "team-b")
    arrivals = []
    for i in range(draw(st.integers(0, 12))):
        whole = draw(st.booleans())
        gang = Gang(
            name=f"g{i}",
            tenant=draw(st.sampled_from(tenants)),
            pods=tuple(
                PodRequest(name=f"g{i}-{j}", cpu_milli=1000, memory_mib=1024,
                           gpu_count=draw(st.integers(1, 2)) if whole else 1,
                           gpu_milli=MILLI if whole else draw(st.sampled_from([250, 500])),
                           qos_class=draw(st.sampled_from(
                               [None, "latency-inference", "training", "best-effort"])))
                for j in range(draw(st.integers(1, 2)))
            ),
        )
        arrivals.append(TimedGang(gang, float(draw(st.integers(0, 60))),
                                  float(draw(st.integers(1, 90)))))
    arrivals.sort(key=lambda a: a.arrival_s)
    return Scenario(nodes=nodes, tenants=tuple(Tenant(t) for t in tenants),
                    arrivals=tuple(arrivals), policy=WATTS)


@settings(max_examples=40, deadline=None)
@given(_scenarios(), st.sampled_from(["firstfit", "bestfit"]), st.booleans(),
       st.sampled_from([1.0, 5.0, 7.5]))
def test_random_scenarios_conserve_gangs_and_capacity(
    sc: Scenario, policy: str, aware: bool, window: float
) -> None:
    r = simulate_timed(sc, TimedConfig(policy=policy, interference_aware=aware,
                                       window_s=window))
    assert sorted(o.gang for o in r.outcomes) == sorted(a.gang.name for a in sc.arrivals)
    durations = {a.gang.name: a.duration_s for a in sc.arrivals}
    for o in r.outcomes:
        assert o.state in ("departed", "waiting")  # no --until: whatever started has left
        if o.start_s is not None:
            assert o.end_s == o.start_s + durations[o.gang]
            assert o.start_s >= o.arrival_s
            assert o.start_s / window == pytest.approx(round(o.start_s / window))
    assert all(-1e-9 <= v <= 1 + 1e-9 for _, v in r.utilisation)
    assert r.utilisation[-1][1] == pytest.approx(0.0)
    assert 0 <= r.slo.attainment <= 1 and (not aware or r.slo.attainment == 1.0)
    assert 1 / len(sc.tenants) - 1e-9 <= r.jain <= 1 + 1e-9


def test_reclaim_evicts_a_borrowed_gang_which_goes_back_to_its_queue() -> None:
    """team-b (quota 0) borrows the only GPU at 0; team-a (quota 1) arrives at 1000 and
    reclaims it: b's gang stops (1000 GPU-seconds lost), a's starts in its place at once, b's
    runs again from the start once a's is done. Without reclaim, a waits until b ends."""
    from solver.types import Reclaim

    def scenario(on: bool) -> Scenario:
        return Scenario(
            nodes=(_node(),),
            tenants=(Tenant("team-a", quota_milli=MILLI), Tenant("team-b", quota_milli=0)),
            arrivals=(TimedGang(_gang("b1", tenant="team-b"), 0.0, 5000.0),
                      TimedGang(_gang("a1"), 1000.0, 100.0)),
            policy=SolverPolicy(reclaim=Reclaim(enabled=on, min_run_s=300.0)))

    on = simulate_timed(scenario(True), TimedConfig(policy="cpsat", window_s=5.0,
                                                    time_limit_s=0.5))
    by = {o.gang: o for o in on.outcomes}
    assert on.reclaimed == 1 and on.reclaim_lost_gpu_s == pytest.approx(1000.0)
    assert by["a1"].start_s == 1000.0  # in the window of the eviction, on the freed GPU
    assert by["b1"].start_s == 1100.0 and by["b1"].end_s == 6100.0  # from the start again
    # its wait is to its first start, as the real systems' is measured (e2e/bench_compare.py):
    # the run reclaim took is lost run time, not waiting
    assert by["b1"].first_start_s == 0.0 and by["b1"].wait_s == 0.0
    assert by["a1"].wait_s == 0.0 and sorted(on.waits_s) == [0.0, 0.0]
    assert on.count("departed") == 2
    off = simulate_timed(scenario(False), TimedConfig(policy="cpsat", window_s=5.0,
                                                      time_limit_s=0.5))
    by = {o.gang: o for o in off.outcomes}
    assert off.reclaimed == 0 and by["a1"].start_s == 5000.0
    # what the plot shows: the eviction in its window, then nothing to plan at the next
    assert on.planning[:2] == ((1000.0, 0, 0, 1), (1100.0, 0, 0, 0))  # woken by a1's end
    assert sum(p[3] for p in on.planning) == on.reclaimed
    assert off.planning == ()  # a1 waits in one window only, too briefly for a reservation


# --------------------------------------------------------------------------------------------
# Declared run times (estimates) against deadlines (bounds)
# --------------------------------------------------------------------------------------------

def _seen(config: TimedConfig) -> list[Snapshot]:
    """The snapshots a best-fit replay of three one-GPU gangs on one GPU solves: g1 runs 0-100
    s, g2 arrives at 1 s and g3 at 60 s (both wait for the GPU)."""
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"),),
        arrivals=(TimedGang(_gang("g1"), 0.0, 100.0), TimedGang(_gang("g2"), 1.0, 100.0),
                  TimedGang(_gang("g3"), 60.0, 100.0)),
    )
    seen: list[Snapshot] = []
    inner = default_solve(replace(config, policy="bestfit"))

    def recording(snapshot: Snapshot) -> Plan:
        seen.append(snapshot)
        return inner(snapshot)

    simulate_timed(sc, replace(config, policy="bestfit"), solve=recording)
    return seen


def _remaining(seen: list[Snapshot]) -> list[float | None]:
    return [s.running[0].remaining_s if s.running else None for s in seen[1:3]]


def test_an_estimate_plans_expected_ends_reads_unknown_once_overrun_and_never_backfills() -> None:
    seen = _seen(TimedConfig(deadline_factor=None, estimate_factor=0.5))
    # at 5 s g1 is expected to end at 50 s; at 60 s it has overrun its estimate: unknown
    assert _remaining(seen) == [pytest.approx(45.0), None]
    # an estimate is never a gang's bound: nothing waiting may backfill on it
    assert all(g.runtime_s is None for s in seen for g in s.gangs)


def test_a_deadline_wins_over_an_estimate() -> None:
    seen = _seen(TimedConfig(deadline_factor=1.0, estimate_factor=0.5))
    assert _remaining(seen) == [pytest.approx(95.0), pytest.approx(40.0)]
    assert all(g.runtime_s == 100.0 for s in seen for g in s.gangs)


def test_no_estimates_and_no_deadlines_know_no_end() -> None:
    assert _remaining(_seen(TimedConfig(deadline_factor=None))) == [None, None]


def test_noisy_estimates_are_drawn_from_the_seed_and_the_gang() -> None:
    noisy = TimedConfig(deadline_factor=None, estimate_factor=1.0, estimate_sigma=1.0, seed=4)
    first, again = _remaining(_seen(noisy)), _remaining(_seen(noisy))
    assert first == again
    assert first[0] is not None and first[0] != pytest.approx(95.0)
    other = _remaining(_seen(replace(noisy, seed=5)))
    assert other[0] != first[0]


@pytest.mark.parametrize(("field", "kwargs"), [
    ("estimate_factor", {"estimate_factor": 0.0}),
    ("estimate_factor", {"estimate_factor": 1e9}),
    ("estimate_sigma", {"estimate_sigma": -0.1}),
    ("estimate_sigma", {"estimate_sigma": 4.0}),
])
def test_bad_estimate_settings_are_refused_naming_the_field(field: str, kwargs: dict[str, float]
                                                            ) -> None:
    with pytest.raises(ProblemError, match=field):
        TimedConfig(**kwargs)  # type: ignore[arg-type]


def _lone(arrivals: tuple[float, ...], *, settle: float | None, window: float = 10.0,
          gpus: int = 4) -> tuple[list[float], int]:
    sc = Scenario(nodes=(_node(gpus=gpus),), tenants=(Tenant("team-a"),),
                  arrivals=tuple(TimedGang(_gang(f"g{i}"), t, 50.0)
                                 for i, t in enumerate(arrivals)),
                  policy=WATTS)
    r = simulate_timed(sc, TimedConfig(policy="bestfit", window_s=window, settle_s=settle))
    return [o.start_s for o in sorted(r.outcomes, key=lambda o: int(o.gang[1:]))], r.solves


def test_a_settle_starts_a_lone_arrival_before_the_window_ends() -> None:
    # without it the gang arriving at 1 waits for the window ending at 10
    assert _lone((1.0,), settle=None) == ([10.0], 1)
    assert _lone((1.0,), settle=0.5) == ([1.5], 1)
    # a settle at or above the window changes nothing
    assert _lone((1.0,), settle=10.0) == ([10.0], 1)
    assert _lone((1.0,), settle=30.0) == ([10.0], 1)


def test_a_burst_closer_than_the_settle_is_decided_in_one_batch() -> None:
    # 1.0, 1.4, 1.8: each within 0.5 s of the last, so one batch at 2.3 decides all three
    assert _lone((1.0, 1.4, 1.8), settle=0.5) == ([2.3, 2.3, 2.3], 1)
    # a gap of 1 s after 1.8: the three go at 2.3, the fourth at 3.3
    assert _lone((1.0, 1.4, 1.8, 2.8), settle=0.5) == ([2.3, 2.3, 2.3, 3.3], 2)


def test_a_trickle_faster_than_the_settle_waits_for_the_window() -> None:
    # arrivals every 0.4 s never settle for 0.5 s before the window ends at 10
    times = tuple(0.4 * i for i in range(1, 30))
    starts, _ = _lone(times, settle=0.5, gpus=64)
    assert set(starts[:24]) == {10.0}
    # after the last arrival (11.6) it settles: 12.1
    assert starts[-1] == pytest.approx(12.1)



def test_a_creation_burst_is_decided_from_its_first_arrival_on() -> None:
    # a pod every 0.04 s from 0.04 to 2.4 (60 pods, faster than the 0.5 s settle): the 40th,
    # at 1.6, makes it a burst (40 pods within 2 s), so the batch runs then, as the controller's
    # does while its scheduler has nothing to bind, not at the burst's end (2.9)
    times = tuple(round(0.04 * i, 2) for i in range(1, 61))
    starts, solves = _lone(times, settle=0.5, gpus=64)
    assert starts[:40] == [pytest.approx(1.6)] * 40
    # then the settle after the first arrival since the last batch (1.64 + 0.5), and so on
    assert starts[40] == pytest.approx(2.14)
    assert starts[-1] == pytest.approx(2.66) and solves == 3  # 2.16 + 0.5, the burst still on
    # a trickle as long that is no burst (a pod every 0.4 s) waits for its end
    assert _lone(times[::10], settle=0.5, gpus=64)[0][0] == pytest.approx(2.54)


def test_while_gangs_wait_a_departure_settles_a_batch_and_an_arrival_does_not() -> None:
    sc = Scenario(nodes=(_node(gpus=1),), tenants=(Tenant("team-a"),),
                  arrivals=(TimedGang(_gang("g0"), 1.0, 15.0), TimedGang(_gang("g1"), 1.2, 25.0),
                            TimedGang(_gang("g2"), 13.0, 30.0)),
                  policy=WATTS)
    r = simulate_timed(sc, TimedConfig(policy="bestfit", window_s=10.0, settle_s=0.5))
    by = {o.gang: o.start_s for o in r.outcomes}
    # g0 and g1 arrive on a quiet cluster: one batch at 1.7 starts g0 and g1 waits. g2's
    # arrival at 13.0 brings nothing forward (its run, longer than g1's, puts it after g1 in
    # the queue: policy.queueing's short-run bonus); g0 leaving at 16.7 does (17.2, before the
    # window at 21.7), and g1 starts; g1 leaving at 42.2 starts g2 at 42.7 (the window: 47.2)
    assert by["g0"] == pytest.approx(1.7)
    assert by["g1"] == pytest.approx(17.2)
    assert by["g2"] == pytest.approx(42.7)
    assert r.solves == 3


def _seen_learning(learned: LearnedRuntimes) -> list[Snapshot]:
    """The snapshots a best-fit replay solves on one GPU, with run times learned from
    departed pods (policy learned_runtimes): team-b's b1 runs 10 s, team-a's g1, g2 and g3
    100 s each; g3 arrives at 150 s, while g2 runs."""
    sc = Scenario(
        nodes=(_node(),),
        tenants=(Tenant("team-a"), Tenant("team-b")),
        arrivals=(TimedGang(_gang("b1", tenant="team-b"), 0.0, 10.0),
                  TimedGang(_gang("g1"), 0.0, 100.0), TimedGang(_gang("g2"), 1.0, 100.0),
                  TimedGang(_gang("g3"), 150.0, 100.0)),
        policy=SolverPolicy(learned_runtimes=learned),
    )
    seen: list[Snapshot] = []
    config = TimedConfig(policy="bestfit", deadline_factor=None)
    inner = default_solve(config)

    def recording(snapshot: Snapshot) -> Plan:
        seen.append(snapshot)
        return inner(snapshot)

    simulate_timed(sc, config, solve=recording)
    return seen


def test_run_times_learned_from_departed_gangs_plan_expected_ends_and_never_backfill() -> None:
    seen = _seen_learning(LearnedRuntimes(enabled=True, min_samples=1, samples=3))
    # team-a's first one-GPU pod to leave taught 100 s; team-b's 10 s pod taught team-a nothing
    known = [(s, r) for s in seen for r in s.running if r.remaining_s is not None]
    # g2 started at 110 s (after b1); at g3's arrival it has run 40 s of the 100 learned
    assert [(r.name, r.remaining_s) for _, r in known] == [("g2-0", pytest.approx(60.0))]
    before = [r for s in seen for r in s.running if r.name.endswith("g1")]
    assert all(r.remaining_s is None for r in before)  # nothing of its kind had finished
    assert all(g.runtime_s is None for s in seen for g in s.gangs)  # no backfill bound
    off = _seen_learning(LearnedRuntimes(enabled=False, min_samples=1, samples=3))
    assert all(r.remaining_s is None for s in off for r in s.running)


# --------------------------------------------------------------------------------------------
# Late reserved starts, and why
# --------------------------------------------------------------------------------------------

def _reserving(config: TimedConfig, *, urgent_at: float | None = None, urgent_priority: int = 5,
               urgent_s: float = 100.0, keep: bool = False) -> TimedResult:
    """g1 holds the one GPU from 0 s for 100 s; g2 (arrived at 1 s) gets the reservation at
    once (``after_s`` 0); with ``urgent_at``, a gang g3 of ``urgent_priority`` that runs
    ``urgent_s`` arrives then and, if it ranks higher, takes the GPU first when g1 ends.
    ``keep``: ``policy.reservations.keep``."""
    arrivals = [TimedGang(_gang("g1"), 0.0, 100.0), TimedGang(_gang("g2"), 1.0, 100.0)]
    if urgent_at is not None:
        arrivals.append(TimedGang(replace(_gang("g3"), priority=urgent_priority), urgent_at,
                                  urgent_s))
    policy = replace(SolverPolicy(), reservations=replace(
        SolverPolicy().reservations, after_s=0.0, keep=keep))
    sc = Scenario(nodes=(_node(),), tenants=(Tenant("team-a"),), arrivals=tuple(arrivals),
                  policy=policy)
    return simulate_timed(sc, replace(config, policy="cpsat", time_limit_s=0.5))


def test_a_reservation_behind_an_estimate_that_overran_is_late_by_the_overrun() -> None:
    # g1 is expected to end at 50 s (half its run) and ends at 100 s: g2 starts 50 s late
    r = _reserving(TimedConfig(deadline_factor=None, estimate_factor=0.5))
    assert (r.reserved_gangs, r.reserved_late, r.reserved_late_overrun) == (1, 1, 1)


def test_an_exact_deadline_keeps_the_reserved_start() -> None:
    r = _reserving(TimedConfig(deadline_factor=1.0))
    assert (r.reserved_gangs, r.reserved_late, r.reserved_late_overrun) == (1, 0, 0)
    assert r.summary()["reserved_late_overrun"] == 0


def test_a_gang_ahead_in_the_queue_makes_a_reservation_late_without_an_overrun() -> None:
    # g3 (priority 5) arrives at 60 s and takes the GPU when g1 ends: g2 starts at 200 s,
    # 100 s after its reserved start, with every end as planned
    r = _reserving(TimedConfig(deadline_factor=1.0), urgent_at=60.0)
    starts = {o.gang: o.start_s for o in r.outcomes}
    assert starts["g3"] < starts["g2"]
    assert (r.reserved_late, r.reserved_late_overrun) == (1, 0)
    assert r.reserved_late_s == pytest.approx(starts["g2"] - 100.0, abs=10.0)


def test_a_kept_reservation_is_not_taken_by_a_later_gang_of_the_same_priority() -> None:
    # g3 arrives at 60 s with a 10 s deadline: its short-run bonus (0.997 points) outranks
    # g2's (0.972, a 100 s deadline), so without keep it takes the GPU when g1 ends and g2
    # starts late; with keep g2 keeps its place and starts as planned, g3 after it
    free = _reserving(TimedConfig(deadline_factor=1.0), urgent_at=60.0, urgent_priority=0,
                      urgent_s=10.0)
    starts = {o.gang: o.start_s for o in free.outcomes}
    assert starts["g3"] < starts["g2"] and free.reserved_late == 1
    kept = _reserving(TimedConfig(deadline_factor=1.0), urgent_at=60.0, urgent_priority=0,
                      urgent_s=10.0, keep=True)
    starts = {o.gang: o.start_s for o in kept.outcomes}
    assert starts["g2"] < starts["g3"]
    assert (kept.reserved_gangs, kept.reserved_late) == (1, 0)


def test_a_gang_of_higher_priority_still_goes_ahead_of_a_kept_reservation() -> None:
    r = _reserving(TimedConfig(deadline_factor=1.0), urgent_at=60.0, keep=True)
    starts = {o.gang: o.start_s for o in r.outcomes}
    assert starts["g3"] < starts["g2"]
    assert (r.reserved_late, r.reserved_late_overrun) == (1, 0)
