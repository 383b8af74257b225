"""Berth's scenario generator: deterministic, valid, and shaped as its spec says."""

from __future__ import annotations

import pytest

from solver.eligibility import node_allows
from solver.simulate.generate import (
    TRAINING_MODELS,
    ClusterSpec,
    GeneratorSpec,
    TenantSpec,
    WorkloadSpec,
    generate,
    generate_cluster,
)
from solver.types import MILLI, ProblemError, TopologyMode


def test_same_seed_same_scenario_other_seed_other_workload() -> None:
    a, b, c = generate(seed=7), generate(seed=7), generate(seed=8)
    assert a == b
    assert a.arrivals != c.arrivals


def test_cluster_has_every_shape_racks_blocks_and_nvlink_domains() -> None:
    nodes = generate_cluster(ClusterSpec(racks=2, nodes_per_rack=3))
    assert len(nodes) == 6
    assert {n.gpus[0].model for n in nodes} == {"H100", "A100", "L4", "T4"}
    assert {n.topology["rack"] for n in nodes} == {"rack-0", "rack-1"}
    assert {n.topology["block"] for n in nodes} == {"block-0"}
    a100 = next(n for n in nodes if n.gpus[0].model == "A100")
    assert len({g.nvlink_domain for g in a100.gpus}) == 2  # two domains of four
    l4 = next(n for n in nodes if n.gpus[0].model == "L4")
    assert all(g.nvlink_domain is None for g in l4.gpus)
    # training nodes fill the first rack so rack-bound gangs have a home
    assert all(g.model in TRAINING_MODELS for n in nodes[:3] for g in n.gpus)


def test_taints_and_cordons_and_the_dedicated_tenant_tolerates() -> None:
    spec = GeneratorSpec(cluster=ClusterSpec(racks=2, nodes_per_rack=4, tainted=1, cordoned=1))
    sc = generate(spec, seed=3)
    tainted = [n for n in sc.nodes if n.taints]
    cordoned = [n for n in sc.nodes if not n.schedulable]
    assert len(tainted) == 1 and len(cordoned) == 1 and tainted[0] is not cordoned[0]
    model = tainted[0].gpus[0].model
    for a in sc.arrivals:
        for pod in a.gang.pods:
            if a.gang.tenant == "team-a" and (not pod.models or model in pod.models):
                assert node_allows(pod, tainted[0]), f"{pod.name} should tolerate the taint"
            if a.gang.tenant != "team-a":
                assert not node_allows(pod, tainted[0])
            assert not node_allows(pod, cordoned[0])


def test_workload_mixes_tenants_kinds_and_meets_the_offered_load() -> None:
    spec = GeneratorSpec(workload=WorkloadSpec(horizon_s=20_000, load=1.0))
    loads = []
    for seed in range(8):
        sc = generate(spec, seed=seed)
        assert {a.gang.tenant for a in sc.arrivals} == {"team-a", "team-b", "team-c"}
        classes = {p.qos_class for a in sc.arrivals for p in a.gang.pods}
        assert classes == {"training", "latency-inference", "batch-inference", "interactive",
                           "best-effort"}
        gpus = sum(len(n.gpus) for n in sc.nodes)
        offered = sum(a.gang.gpu_demand_milli / MILLI * a.duration_s for a in sc.arrivals)
        loads.append(offered / (gpus * 20_000))
        times = [a.arrival_s for a in sc.arrivals]
        assert times == sorted(times) and times[-1] < 20_000
    # big training gangs with long-tailed run times make one seed noisy; the mean is not
    assert 0.85 < sum(loads) / len(loads) < 1.15


def test_training_takes_whole_gpus_of_training_models_with_topology() -> None:
    sc = generate(GeneratorSpec(workload=WorkloadSpec(horizon_s=10_000)), seed=2)
    training = [a.gang for a in sc.arrivals if "-train-" in a.gang.name]
    assert training
    for g in training:
        for p in g.pods:
            assert p.gpu_milli == MILLI and p.models == TRAINING_MODELS
        if len(g.pods) > 1:
            assert g.topology is not None and g.topology.level == "rack"
            assert g.topology.mode == TopologyMode.REQUIRED
    shared = [p for a in sc.arrivals for p in a.gang.pods if p.shares_gpu]
    assert shared and all(p.gpu_count == 1 for p in shared)
    # fine-tuning runs are training work on a share of any GPU: they meet serving pods
    assert any(p.qos_class == "training" and not p.models for p in shared)


def test_every_gang_fits_an_empty_cluster_somewhere() -> None:
    sc = generate(seed=4)
    for a in sc.arrivals:
        for pod in a.gang.pods:
            fits = [n for n in sc.nodes if node_allows(pod, n) and len(n.gpus) >= pod.gpu_count]
            assert fits, f"{pod.name} fits no node"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ClusterSpec(racks=0), "cluster.racks"),
        (lambda: ClusterSpec(tainted=10), "cluster.tainted"),
        (lambda: ClusterSpec(mix=()), "cluster.mix"),
        (lambda: WorkloadSpec(load=0), "workload.load"),
        (lambda: WorkloadSpec(horizon_s=-1), "workload.horizon_s"),
        (lambda: WorkloadSpec(tenants=()), "workload.tenants"),
        (lambda: WorkloadSpec(tenants=(TenantSpec("x"), TenantSpec("x"))), "workload.tenants"),
        (lambda: TenantSpec("x", weight=0), "tenants[x].weight"),
    ],
)
def test_bad_specs_name_the_field(make, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProblemError) as err:
        make()
    assert err.value.path == field
