"""What a tenant's user may write is bounded, and what is Berth's stays Berth's, on the real
apiserver with ``berth webhook`` registered as ``berth certs`` renders it.

The attacker has pod create rights in one tenant's namespace only. A priority beyond the
tenant's bound and a QoS class the tenant may not use are refused with the bound or the
allowed classes named; a pod whose GPUs are in an init container is gated with exactly those
GPUs and nothing added to its main container; Berth's own keys a pod brings (a placement, a
tenant) do not come back from the apiserver.

The last two also rest on the webhook registration sending such pods to Berth at all
(config/base/webhook.yaml's matchConditions look at init containers and at berth.dev/ keys,
and ``berth certs`` renders them); with a registration that saw only app containers'
``nvidia.com/gpu`` they would fail, which is the hole they guard.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import GATE, BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth webhook on this host; kind deploys it from config/"),
]


def _bounded(doc: dict[str, Any]) -> None:
    """team-b gets its own priority bound; team-a keeps the default (admission.maxPriority)."""
    for tenant in doc["tenants"]:
        if tenant["name"] == "team-b":
            tenant.setdefault("limits", {})["maxPriority"] = 5


@pytest.fixture
def webhook(cluster: E2ECluster, tenant_namespaces: dict[str, str],
            tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces,
                       edit_policy=_bounded) as hook:
        yield hook


def _refusal(cluster: E2ECluster, namespace: str, manifest: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_pod(namespace, manifest)
    assert refused.value.status == 403, refused.value.body
    return str(refused.value.body)


def test_priority_beyond_the_tenants_bound_is_refused_with_the_bound(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    team_a, team_b = tenant_namespaces["team-a"], tenant_namespaces["team-b"]
    for i, value in enumerate(["1" + "0" * 30, "1000"]):
        body = _refusal(cluster, team_a, pod_manifest(
            f"greedy-{i}", gpus=1, annotations={c.ANNOTATION_PRIORITY: value}))
        assert f"metadata.annotations[{c.ANNOTATION_PRIORITY}]" in body
        assert "from -100 to 100" in body and "admission.maxPriority" in body, body
    body = _refusal(cluster, team_b, pod_manifest(
        "greedy-b", gpus=1, annotations={c.ANNOTATION_PRIORITY: "6"}))
    assert "from -5 to 5" in body and "limits.maxPriority" in body, body
    # within the bound: admitted and gated
    pod = cluster.core.create_namespaced_pod(team_a, pod_manifest(
        "fair", gpus=1, annotations={c.ANNOTATION_PRIORITY: "100"}))
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    names = {p.metadata.name for p in cluster.core.list_namespaced_pod(team_a).items}
    assert names == {"fair"}


def test_a_qos_label_the_tenant_may_not_use_is_refused(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]  # may use training and inference
    body = _refusal(cluster, ns, pod_manifest(
        "notebook", gpus=1, labels={c.LABEL_QOS_CLASS: "notebook"}))
    assert f"metadata.labels[{c.LABEL_QOS_CLASS}]" in body
    assert "QoS class 'notebook' is not allowed for tenant 'team-a'" in body, body
    pod = cluster.core.create_namespaced_pod(ns, pod_manifest(
        "serving", gpus=1, annotations={c.ANNOTATION_QOS_CLASS: "inference"}))
    assert pod.metadata.labels[c.LABEL_QOS_CLASS] == "inference"  # what the controller reads


def test_an_init_container_only_gpu_pod_is_gated_with_its_init_gpus(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    manifest = pod_manifest("prep")
    manifest["spec"]["initContainers"] = [{
        "name": "warmup", "image": "registry.invalid/warmup:latest",
        "resources": {"limits": {c.RESOURCE_GPU: "2"}}}]
    pod = cluster.core.create_namespaced_pod(ns, manifest)
    assert [g.name for g in pod.spec.scheduling_gates or []] == [GATE], (
        "the init-container GPU pod was not screened: the webhook registration's "
        "matchConditions do not send it to Berth")
    assert pod.metadata.annotations[c.ANNOTATION_GPU_COUNT] == "2"
    assert pod.spec.init_containers[0].resources.limits[c.RESOURCE_GPU] == "2"
    main = pod.spec.containers[0]
    assert c.RESOURCE_GPU not in (main.resources.limits or {})
    assert not main.env  # the assignment env goes to the container that holds the GPUs
    assert c.ENV_GPU_ASSIGNMENT in {e.name for e in pod.spec.init_containers[0].env}


def test_berths_keys_brought_by_a_non_gpu_pod_do_not_come_back(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    pod = cluster.core.create_namespaced_pod(ns, pod_manifest(
        "forger", labels={c.LABEL_TENANT: "team-b", "app": "web"},
        annotations={c.ANNOTATION_ASSIGNED_NODE: cluster.nodes[0].name,
                     c.ANNOTATION_PRIORITY: "5"}))
    labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
    assert c.LABEL_TENANT not in labels, "a forged tenant label came back from the apiserver"
    assert c.ANNOTATION_ASSIGNED_NODE not in annotations
    assert labels["app"] == "web" and annotations[c.ANNOTATION_PRIORITY] == "5"
    assert not pod.spec.scheduling_gates
    stored = cluster.core.read_namespaced_pod("forger", ns)
    assert c.LABEL_TENANT not in (stored.metadata.labels or {})
