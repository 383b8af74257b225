"""Pod and node JSON -> the solver's types."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.controller import quantity, trust
from admission.controller import translate as tr
from admission.controller.translate import TranslationError
from solver.eligibility import node_allows, why_not
from solver.types import GpuShare, TopologyMode
from tests.admission.controller.harness import settings
from tests.admission.controller.objects import node, pod, recorded

TOPO = {"rack": "topology.kubernetes.io/rack", "block": "topology.kubernetes.io/block"}


def test_recorded_node() -> None:
    n = tr.node_from_api(recorded("node-gpu.json"), TOPO)
    assert n.name == "gpu-node-0"
    assert n.cpu_milli == 191500
    assert n.memory_mib == 2086666240 // 1024
    assert [g.index for g in n.gpus] == list(range(8))
    assert {g.model for g in n.gpus} == {"NVIDIA-H100-80GB-HBM3"}
    assert n.gpus[0].memory_mib == 81559
    assert n.topology == {"rack": "rack-1", "block": "block-a"}
    assert [(t.key, t.effect) for t in n.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert n.ready and n.schedulable


def test_node_health() -> None:
    assert not tr.node_from_api(node("a", ready=False), TOPO).usable
    assert not tr.node_from_api(node("a", cordoned=True), TOPO).usable


def test_recorded_gated_pod() -> None:
    p = recorded("pod-gated.json")
    req = tr.pod_request(p)
    assert req.name == "team-a/trainer-0"
    assert (req.cpu_milli, req.memory_mib) == (8000, 65536)
    assert (req.gpu_count, req.gpu_milli) == (4, 1000)
    assert tr.gang_name(p) == "team-a/trainer" and tr.gang_size(p) == 2
    assert trust.tenant_of(p, settings()) == "team-a"
    assert trust.demand_problem(p, settings()) is None
    assert tr.has_berth_gate(p)
    # The pod tolerates the GPU taint, so the recorded node admits it.
    assert node_allows(req, tr.node_from_api(recorded("node-gpu.json"), TOPO))


def test_untolerated_taint_and_affinity_are_respected() -> None:
    p = pod("x")
    p["spec"]["tolerations"] = []
    n = tr.node_from_api(node("n1"), TOPO)
    assert why_not(tr.pod_request(p), n) == "untolerated taint nvidia.com/gpu=present:NoSchedule"
    q = pod("y", affinity_terms=[{"matchExpressions": [
        {"key": "topology.kubernetes.io/rack", "operator": "In", "values": ["rack-9"]}]}])
    assert why_not(tr.pod_request(q), n) == "required node affinity does not match"
    pinned = pod("z", affinity_terms=[{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
    assert node_allows(tr.pod_request(pinned), n)
    assert not node_allows(tr.pod_request(pinned), tr.node_from_api(node("n2"), TOPO))


def test_fraction_and_topology() -> None:
    p = pod("f", gpus=1, milli=250)
    p["metadata"]["annotations"]["berth.dev/topology"] = "required:rack"
    req = tr.pod_request(p)
    assert (req.gpu_count, req.gpu_milli) == (1, 250) and req.shares_gpu
    topo = tr.topology_requirement(p)
    assert topo is not None and (topo.level, topo.mode) == ("rack", TopologyMode.REQUIRED)


def test_init_containers_and_overhead() -> None:
    p = pod("i", cpu="1", memory="1Gi")
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {
        "cpu": "4", "memory": "512Mi"}}}]
    p["spec"]["overhead"] = {"cpu": "250m", "memory": "64Mi"}
    assert tr.pod_cpu_memory(p) == (4250, 1024 + 64)


def test_running_pod_not_placed_by_berth_holds_whole_gpus() -> None:
    n = tr.node_from_api(node("n1", gpus=4), TOPO)
    r = tr.running_from_pod(pod("other", gpus=2, gated=False, node_name="n1"), n, {0: 1000})
    assert [s.index for s in r.gpus] == [1, 2]
    berth = pod("b", gpus=1, milli=500, gated=False, node_name="n1")
    berth["metadata"]["annotations"].update(tr.assignment_annotations(
        "n1", (GpuShare(3, 500),), "p1", "2026-11-29T14:00:00Z"))
    planned = trust.planned_shares(berth, settings())
    assert planned == ("n1", (GpuShare(3, 500),))
    assert tr.running_from_pod(berth, n, {}, planned=planned[1]).gpus == (GpuShare(3, 500),)
    # Without a plan the caller trusts, the pod holds what its resources say: its share is
    # a time-slicing slot, not a whole GPU.
    assert tr.running_from_pod(berth, n, {}).gpus == ()


@pytest.mark.parametrize("bad", ["x", "-1", "1.5.2", "Gi", ""])
def test_bad_quantities_are_named(bad: str) -> None:
    p = pod("q")
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = bad
    with pytest.raises(TranslationError, match=r"pod team-a/q: cpu"):
        tr.pod_request(p)


@given(st.text(max_size=12))
def test_random_quantities_never_crash(text: str) -> None:
    try:
        value = quantity.parse(text)
    except quantity.QuantityError:
        return
    assert value >= 0


@given(st.dictionaries(st.sampled_from([
    "berth.dev/gpu-count", "berth.dev/gpu-milli", "berth.dev/gang-size", "berth.dev/topology",
    "berth.dev/priority", "berth.dev/gpu-memory-mib"]), st.text(max_size=8), max_size=6))
def test_random_annotations_give_a_pod_or_a_named_error(ann: dict[str, str]) -> None:
    p = pod("r", gang="g", size=2)
    p["metadata"]["annotations"].update(ann)
    try:
        tr.pod_request(p)
        tr.gang_size(p)
        tr.topology_requirement(p)
        tr.priority(p)
    except TranslationError as exc:
        assert "team-a/r" in str(exc)


def test_agent_annotation_wins_over_gfd_labels() -> None:
    import json

    n = node("agent-node", gpus=4)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA H100 80GB HBM3",
             "memory_mib": 81559, "pci_bus_id": f"00000000:1{i}:00.0", "numa_node": 0,
             "compute_capability": "9.0", "mig_enabled": False, "mig": [],
             "nvlink_domain": "nvl0" if i < 2 else "nvl1", "nvlink_links": 4,
             "nvlink_gpu_peers": [], "power_limit_w": 700,
             "error": "GPU is lost" if i == 3 else None} for i in range(4)]
    n["metadata"]["annotations"]["berth.dev/gpus"] = json.dumps(gpus)
    got = tr.node_from_api(n, TOPO).gpus
    assert [(g.index, g.nvlink_domain) for g in got] == [
        (0, "agent-node/nvl0"), (1, "agent-node/nvl0"), (2, "agent-node/nvl1")]
    n["metadata"]["annotations"]["berth.dev/gpus"] = "{not json"
    with pytest.raises(TranslationError, match=r"node agent-node: berth\.dev/gpus"):
        tr.node_from_api(n, TOPO)


def test_times_round_trip_through_the_one_reader() -> None:
    from datetime import UTC, datetime

    from admission.controller.leader import micro_time

    t = datetime(2026, 11, 29, 18, 0, 7, tzinfo=UTC)
    assert tr.rfc3339(t) == "2026-11-29T18:00:07Z"
    assert tr.parse_time(tr.rfc3339(t)) == t
    fine = t.replace(microsecond=250)
    assert tr.parse_time(micro_time(fine)) == fine  # a Lease's MicroTime reads back exactly
    assert tr.parse_time(t.replace(tzinfo=None)) == t  # a naive datetime is taken as UTC
    assert tr.parse_time("2026-11-29T19:00:07+01:00") == t
    assert tr.parse_time("yesterday") is None and tr.parse_time(None) is None
