"""Faults of the control plane itself: Kubernetes is Berth's only store, so a restarted
apiserver must hand back every gated pod as it was, and a release must still work after."""

from __future__ import annotations

import os

import pytest

from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_condition, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="restarts a process of the local cluster"),
]

GATE = "berth.dev/admission"


def test_apiserver_restart_keeps_gated_pods_and_releases_still_work(
    cluster: E2ECluster, namespace: str
) -> None:
    assert cluster.local is not None
    core = cluster.core
    core.create_namespaced_pod(namespace, pod_manifest("held", gpus=4, gates=(GATE,)))
    before = next(r.pid for r in cluster.local.records if r.name == "kube-apiserver")

    cluster.local.restart("kube-apiserver")

    after = next(r.pid for r in cluster.local.records if r.name == "kube-apiserver")
    assert after != before
    pod = core.read_namespaced_pod("held", namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    assert pod.spec.node_name is None
    assert pod_condition(pod, "PodScheduled").reason == "SchedulingGated"

    pod.spec.scheduling_gates = None
    core.replace_namespaced_pod("held", namespace, pod)
    eventually(lambda: core.read_namespaced_pod("held", namespace),
               lambda p: p.status.phase == "Running", timeout=60,
               what="the pod released after the restart to be bound and Running")
