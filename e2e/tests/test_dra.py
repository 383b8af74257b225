"""GPUs through Dynamic Resource Allocation on the real control plane (docs/dra.md).

kwok nodes whose GPUs exist only as ResourceSlices (e2e/dra.py publishes them, as NVIDIA's
driver would), the real kube-controller-manager making claims from templates, the real
kube-scheduler allocating them, and ``berth serve`` as deployed (config/base RBAC) deciding
where each pod goes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import BerthWebhook
from e2e.conftest import E2ECluster, _wait_nodes_ready
from e2e.dra import A100, DraNode, claim_pod, product_is, profile_is, publish, template, withdraw
from e2e.helpers import eventually, pod_manifest
from e2e.tests.test_berth_release import berth  # noqa: F401  (the fixture: berth serve)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

# dra-0: 8 whole A100s; dra-1: one A100 in MIG mode, published as two 3g.40gb devices.
NODES = (DraNode("dra-0", gpus=8), DraNode("dra-1", gpus=0, mig=(("3g.40gb", "3g.40gb"),)))


@pytest.fixture(scope="module")
def dra_nodes(cluster: E2ECluster) -> Iterator[tuple[DraNode, ...]]:
    try:
        publish(cluster.api, NODES)
        _wait_nodes_ready(cluster.core, [n.name for n in NODES])
        yield NODES
    finally:
        withdraw(cluster.api, NODES)


def _resource(cluster: E2ECluster) -> client.ResourceV1Api:
    return client.ResourceV1Api(cluster.api)


def _claim_of(cluster: E2ECluster, ns: str, pod: Any) -> Any:
    (status,) = pod.status.resource_claim_statuses
    return _resource(cluster).read_namespaced_resource_claim(status.resource_claim_name, ns)


def _running(cluster: E2ECluster, ns: str, name: str, what: str, hook: BerthWebhook) -> Any:
    try:
        return eventually(lambda: cluster.core.read_namespaced_pod(name, ns),
                          lambda p: p.status.phase in ("Running", "Succeeded"),
                          timeout=120, what=what)
    except AssertionError as exc:
        log = "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])
        raise AssertionError(f"{exc}\n--- berth serve log:\n{log}") from None


def test_a_template_pod_for_two_gpus_is_gated_placed_and_allocated_on_the_planned_node(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    ns = tenant_namespaces["team-a"]
    _resource(cluster).create_namespaced_resource_claim_template(
        ns, template("two-a100", 2, selectors=[product_is(A100)]))
    created = cluster.core.create_namespaced_pod(ns, claim_pod("train", "two-a100"))
    # gated at creation, tagged with its tenant and its demand read from the template
    assert [g.name for g in created.spec.scheduling_gates] == [c.SCHEDULING_GATE]
    ann = created.metadata.annotations
    assert ann[c.ANNOTATION_GPU_COUNT] == "2" and ann[c.ANNOTATION_SHARING] == "dra"
    assert ann[c.ANNOTATION_ALLOWED_MODELS] == "NVIDIA-A100-SXM4-80GB"
    assert created.metadata.labels[c.LABEL_TENANT] == "team-a"
    pod = _running(cluster, ns, "train", "the claim pod released, allocated, bound, run", berth)
    # placed where Berth planned it: a node that publishes only ResourceSlices
    assert pod.spec.node_name == "dra-0"
    assert pod.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE] == "dra-0"
    claim = _claim_of(cluster, ns, pod)
    results = claim.status.allocation.devices.results
    assert len(results) == 2 and {r.pool for r in results} == {"dra-0"}
    assert {r.driver for r in results} == {c.DRA_DRIVER}
    # The allocator picks the devices on the pinned node; the plan named indexes. Both are
    # reported; only the node is a promise (docs/dra.md). Two more pods fill dra-0 further.
    pods = [pod]
    for name in ("train-1", "train-2"):
        cluster.core.create_namespaced_pod(ns, claim_pod(name, "two-a100"))
        pods.append(_running(cluster, ns, name, f"{name} to run", berth))
    differ = total = 0
    for p in pods:
        assert p.spec.node_name == "dra-0"
        planned = {f"gpu-{i}" for i in
                   p.metadata.annotations[c.ANNOTATION_ASSIGNED_GPUS].split(",")}
        allocated = {r.device for r in _claim_of(cluster, ns, p).status.allocation.devices.results}
        differ, total = differ + len(planned - allocated), total + len(planned)
    print(f"\nDRA plan vs allocation: {differ} of {total} devices differ")


def test_the_claims_gpus_count_as_held_for_the_next_pod(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    ns = tenant_namespaces["team-a"]
    _resource(cluster).create_namespaced_resource_claim_template(ns, template("six", 6))
    _resource(cluster).create_namespaced_resource_claim_template(ns, template("four", 4))
    cluster.core.create_namespaced_pod(ns, claim_pod("first", "six"))
    _running(cluster, ns, "first", "the 6-GPU claim pod to run", berth)
    # 2 of dra-0's 8 GPUs are left: a 4-GPU claim pod waits, gated, with a reason
    cluster.core.create_namespaced_pod(ns, claim_pod("second", "four"))
    time.sleep(6)  # three batch windows
    second = cluster.core.read_namespaced_pod("second", ns)
    assert second.spec.node_name is None
    assert [g.name for g in second.spec.scheduling_gates] == [c.SCHEDULING_GATE]
    # the first ends: its claim is deallocated and the second runs
    cluster.core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
    _running(cluster, ns, "second", "the 4-GPU claim pod to run once the 6 are free", berth)


def test_a_forbidden_model_in_a_selector_is_refused_with_its_message(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    ns = tenant_namespaces["team-b"]  # team-b may use A100s only
    _resource(cluster).create_namespaced_resource_claim_template(
        ns, template("h100", 1, selectors=[product_is("NVIDIA H100 80GB HBM3")]))
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_pod(ns, claim_pod("sneaky", "h100"))
    assert refused.value.status == 403
    body = str(refused.value.body)
    assert "spec.resourceClaims[0].resourceClaimTemplateName" in body
    assert "NVIDIA-H100-80GB-HBM3 is not allowed for tenant 'team-b'" in body
    # and a selector Berth cannot plan is refused, naming the forms it reads
    _resource(cluster).create_namespaced_resource_claim_template(
        ns, template("big-memory", 1, selectors=[
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0']))
    with pytest.raises(ApiException) as unreadable:
        cluster.core.create_namespaced_pod(ns, claim_pod("memory", "big-memory"))
    assert "is a selector Berth cannot plan" in str(unreadable.value.body)


def test_a_mig_claim_lands_on_a_mig_device(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    ns = tenant_namespaces["team-a"]
    _resource(cluster).create_namespaced_resource_claim_template(
        ns, template("slice", 1, selectors=[profile_is("3g.40gb")],
                     device_class=c.DRA_MIG_CLASS))
    cluster.core.create_namespaced_pod(ns, claim_pod("small", "slice"))
    pod = _running(cluster, ns, "small", "the MIG claim pod to run", berth)
    assert pod.spec.node_name == "dra-1"
    assert pod.metadata.annotations[c.ANNOTATION_GPU_MILLI] == "429"
    (result,) = _claim_of(cluster, ns, pod).status.allocation.devices.results
    assert result.pool == "dra-1" and "-mig-3g-40gb-" in result.device


def test_quota_holds_across_claims_and_device_plugin_gpus(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    # team-a: quota 16 GPUs and 8 more borrowed at most: 24. Two 8-GPU device-plugin pods and
    # one 8-GPU claim pod reach it; one more GPU through a claim must wait.
    ns = tenant_namespaces["team-a"]
    for i in range(2):
        cluster.core.create_namespaced_pod(ns, pod_manifest(f"plugin-{i}", gpus=8))
    _resource(cluster).create_namespaced_resource_claim_template(ns, template("eight", 8))
    _resource(cluster).create_namespaced_resource_claim_template(ns, template("one", 1))
    cluster.core.create_namespaced_pod(ns, claim_pod("claims-8", "eight"))
    for name in ("plugin-0", "plugin-1", "claims-8"):
        _running(cluster, ns, name, f"{name} to run (24 GPUs: the tenant's limit)", berth)
    cluster.core.create_namespaced_pod(ns, claim_pod("claims-1", "one"))
    time.sleep(6)  # three batch windows: over the limit, it waits
    extra = cluster.core.read_namespaced_pod("claims-1", ns)
    assert extra.spec.node_name is None
    assert [g.name for g in extra.spec.scheduling_gates] == [c.SCHEDULING_GATE]


def test_a_gang_sharing_one_claim_is_charged_once_and_runs_on_its_node(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    # two pods of one gang name one 6-GPU ResourceClaim: charged twice (12) they could not fit
    # on dra-0's 8 GPUs; charged once, both run there and the claim is reserved for both
    ns = tenant_namespaces["team-a"]
    spec = template("unused", 6)["spec"]["spec"]
    _resource(cluster).create_namespaced_resource_claim(ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "ring-gpus"}, "spec": spec})
    for i in range(2):
        manifest = claim_pod(f"ring-{i}", "unused")
        manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "ring-gpus"}]
        manifest["metadata"]["annotations"] = {c.ANNOTATION_GANG: "ring",
                                               c.ANNOTATION_GANG_SIZE: "2"}
        cluster.core.create_namespaced_pod(ns, manifest)
    pods = [_running(cluster, ns, f"ring-{i}", f"ring-{i} to run", berth) for i in range(2)]
    assert {p.spec.node_name for p in pods} == {"dra-0"}
    claim = _resource(cluster).read_namespaced_resource_claim("ring-gpus", ns)
    assert len(claim.status.allocation.devices.results) == 6
    assert {r.name for r in claim.status.reserved_for} == {"ring-0", "ring-1"}


def _minor(cluster: E2ECluster) -> int:
    info = client.VersionApi(cluster.api).get_code()
    return int("".join(ch for ch in info.minor if ch.isdigit()))


def test_nvidia_gpu_mapped_to_dra_runs_on_dra_gpus_counted_once(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    if _minor(cluster) < 37:  # DRAExtendedResource: alpha (off) in 1.34, GA in 1.37
        pytest.skip("the DeviceClass field extendedResourceName is GA from Kubernetes 1.37; "
                    "e2e/ci.sh runs this test on KUBERNETES_NEWEST_VERSION")
    resource = _resource(cluster)
    resource.patch_device_class(c.DRA_GPU_CLASS,
                                {"spec": {"extendedResourceName": c.RESOURCE_GPU}})
    try:
        cls = resource.read_device_class(c.DRA_GPU_CLASS)
        assert cls.spec.extended_resource_name == c.RESOURCE_GPU, "the field was dropped"
        time.sleep(3)  # the controller's DeviceClass watch
        ns = tenant_namespaces["team-a"]
        # two 4-GPU nvidia.com/gpu pods held to the DRA nodes: both fit on dra-0's 8 GPUs only
        # if the first one's GPUs are counted once (its resources and its claim are the same)
        for name in ("mapped-0", "mapped-1"):
            manifest = pod_manifest(name, gpus=4)
            manifest["spec"]["nodeSelector"] = {"berth-e2e/dra": "true"}
            cluster.core.create_namespaced_pod(ns, manifest)
            pod = _running(cluster, ns, name, f"{name} to run on DRA GPUs", berth)
            assert pod.spec.node_name == "dra-0"
            ext = pod.status.extended_resource_claim_status
            assert ext is not None and ext.resource_claim_name
            claim = resource.read_namespaced_resource_claim(ext.resource_claim_name, ns)
            assert len(claim.status.allocation.devices.results) == 4
    finally:
        resource.patch_device_class(c.DRA_GPU_CLASS, {"spec": {"extendedResourceName": None}})


def test_two_shares_by_consumable_capacity_meet_on_one_gpu_and_a_third_waits(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook,  # noqa: F811
    dra_nodes: tuple[DraNode, ...],
) -> None:
    if _minor(cluster) < 36:  # DRAConsumableCapacity: alpha (off) in 1.34, beta (on) from 1.36
        pytest.skip("consumable capacity (allowMultipleAllocations, capacity.requests) is on "
                    "by default from Kubernetes 1.36; e2e/ci.sh runs this test on "
                    "KUBERNETES_NEWEST_VERSION")
    shared = (DraNode("dra-shared", gpus=1, shared=True),)
    publish(cluster.api, shared)
    try:
        _wait_nodes_ready(cluster.core, ["dra-shared"])
        slice_ = _resource(cluster).read_resource_slice(f"dra-shared-{c.DRA_DRIVER}")
        assert slice_.spec.devices[0].allow_multiple_allocations, "the field was dropped"
        time.sleep(3)  # the controller's ResourceSlice watch
        ns = tenant_namespaces["team-a"]
        _resource(cluster).create_namespaced_resource_claim_template(
            ns, template("half-a100", memory="40Gi"))
        for i in range(2):
            manifest = claim_pod(f"half-{i}", "half-a100")
            manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-shared"}
            created = cluster.core.create_namespaced_pod(ns, manifest)
            ann = created.metadata.annotations
            assert [g.name for g in created.spec.scheduling_gates] == [c.SCHEDULING_GATE]
            assert ann[c.ANNOTATION_GPU_MILLI] == "500", ann
            assert ann[c.ANNOTATION_GPU_MEMORY_MIB] == str(40 * 1024)
        pods = [_running(cluster, ns, f"half-{i}", f"half-{i} to run on the shared GPU", berth)
                for i in range(2)]
        assert {p.spec.node_name for p in pods} == {"dra-shared"}
        assert {p.metadata.annotations[c.ANNOTATION_ASSIGNED_GPUS] for p in pods} == {"0"}
        results = []
        for p in pods:
            (result,) = _claim_of(cluster, ns, p).status.allocation.devices.results
            results.append(result)
        assert {r.device for r in results} == {"gpu-0"}
        assert [r.consumed_capacity["memory"] for r in results] == ["40Gi", "40Gi"]
        assert len({r.share_id for r in results}) == 2
        # the GPU's memory is spoken for: a third share waits behind Berth's gate
        manifest = claim_pod("half-2", "half-a100")
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-shared"}
        cluster.core.create_namespaced_pod(ns, manifest)
        time.sleep(8)  # two batch windows
        third = cluster.core.read_namespaced_pod("half-2", ns)
        assert [g.name for g in third.spec.scheduling_gates or []] == [c.SCHEDULING_GATE]
    finally:
        withdraw(cluster.api, shared)
