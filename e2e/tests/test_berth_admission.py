"""Transparent admission through Berth's webhook, on the real apiserver.

Pods are created the way kubectl and the Job controller create them; the apiserver calls
``berth webhook`` (a separate process, TLS, caBundle from ``berth certs``) and stores what it
returns. GPU pods come out gated, labelled with their tenant and gang and translated to the
sharing backend's resources; other pods are untouched; bad requests are refused with the
webhook's message, and nothing refused is stored.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import GATE, BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_condition, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth webhook on this host; kind deploys it from config/"),
]


@pytest.fixture
def webhook(cluster: E2ECluster, tenant_namespaces: dict[str, str],
            tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces) as hook:
        yield hook


def test_gpu_pods_come_out_gated_tagged_and_translated(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    core = cluster.core
    ns = tenant_namespaces["team-a"]

    pod = core.create_namespaced_pod(ns, pod_manifest("single", gpus=2))
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    assert pod.metadata.labels[c.LABEL_TENANT] == "team-a"
    assert pod.metadata.labels[c.LABEL_MANAGED] == "true"
    assert pod.metadata.annotations[c.ANNOTATION_GPU_COUNT] == "2"
    env = {e.name for e in pod.spec.containers[0].env or []}
    assert c.ENV_GPU_ASSIGNMENT in env
    stored = eventually(lambda: core.read_namespaced_pod("single", ns),
                        lambda p: pod_condition(p, "PodScheduled") is not None,
                        timeout=30, what="the scheduler to see the gated pod")
    assert pod_condition(stored, "PodScheduled").reason == "SchedulingGated"

    # A half GPU (KAI's vocabulary) becomes time-slicing slots of the shared resource.
    frac = pod_manifest("half", annotations={c.KAI_FRACTION: "0.5"})
    pod = core.create_namespaced_pod(ns, frac)
    limits = pod.spec.containers[0].resources.limits
    assert limits["nvidia.com/gpu.shared"] == "2"
    assert pod.metadata.annotations[c.ANNOTATION_GPU_MILLI] == "500"
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]


def test_job_pods_form_one_gang_and_wait(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    template = pod_manifest("unused", gpus=8)
    template["spec"]["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "llama-ft"},
           "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"app": "llama"}},
                                 "spec": template["spec"]}}}
    client.BatchV1Api(cluster.api).create_namespaced_job(ns, job)
    # The real Job controller (kube-controller-manager) creates the pods through the webhook.
    pods = eventually(
        lambda: cluster.core.list_namespaced_pod(ns, label_selector="job-name=llama-ft").items,
        lambda items: len(items) == 2, timeout=60, what="the Job controller to create 2 pods")
    gangs = {p.metadata.labels[c.LABEL_GANG] for p in pods}
    assert len(gangs) == 1, gangs
    for p in pods:
        assert p.metadata.annotations[c.ANNOTATION_GANG_SOURCE] == "job"
        assert [g.name for g in p.spec.scheduling_gates] == [GATE]
        assert p.spec.node_name is None


def test_non_gpu_pod_passes_untouched(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    pod = cluster.core.create_namespaced_pod(tenant_namespaces["team-a"], pod_manifest("web"))
    assert not pod.spec.scheduling_gates
    assert not any(k.startswith(f"{c.DOMAIN}/") for k in (pod.metadata.labels or {}))
    running = eventually(
        lambda: cluster.core.read_namespaced_pod("web", tenant_namespaces["team-a"]),
        lambda p: p.status.phase == "Running", timeout=60,
        what="the untouched pod to be scheduled and Running")
    assert running.spec.node_name


REFUSALS = [
    ("bad fraction", {"annotations": {c.ANNOTATION_FRACTION: "0.3"}},
     "0.3 is not on this cluster's fraction grid"),
    ("forbidden model", {"annotations": {c.ANNOTATION_GPU_MODELS: "NVIDIA-H100-80GB-HBM3"}},
     "GPU model NVIDIA-H100-80GB-HBM3 is not allowed for tenant 'team-b'"),
    ("spoofed tenant", {"labels": {c.LABEL_TENANT: "team-a"}},
     "claims tenant 'team-a' but the namespace belongs to tenant 'team-b'"),
]


def test_bad_requests_are_refused_with_their_message_and_not_stored(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-b"]
    for i, (case, meta, needle) in enumerate(REFUSALS):
        manifest = pod_manifest(f"bad-{i}", gpus=1, **meta)
        with pytest.raises(ApiException) as refused:
            cluster.core.create_namespaced_pod(ns, manifest)
        assert refused.value.status == 403, case
        assert needle in refused.value.body, (case, refused.value.body)
    assert cluster.core.list_namespaced_pod(ns).items == []
