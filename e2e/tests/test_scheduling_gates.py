"""The release path Berth relies on, checked against the real apiserver and kube-scheduler.

A gated pod must stay unscheduled; removing the gate and adding node affinity in one update
(KEP-3838) must be accepted, and kube-scheduler must then bind the pod inside the chosen
domain, where kwok runs it. The apiserver must also refuse the updates Berth must never make
(re-adding a gate, loosening affinity), since the controller's design depends on that.
"""

from __future__ import annotations

import time

import pytest
from kubernetes.client.rest import ApiException

from admission.devcluster.nodes import GPU_RESOURCE, TOPOLOGY_LABELS
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_condition, pod_manifest

pytestmark = pytest.mark.e2e

GATE = "berth.dev/admission"
RACK_LABEL = TOPOLOGY_LABELS["rack"]


def _rack_term(rack: str) -> dict[str, object]:
    return {"matchExpressions": [{"key": RACK_LABEL, "operator": "In", "values": [rack]}]}


def test_gated_pod_waits_then_binds_in_the_rack_its_release_chose(
    cluster: E2ECluster, namespace: str
) -> None:
    core = cluster.core
    core.create_namespaced_pod(namespace, pod_manifest("trainer", gpus=8, gates=(GATE,)))

    gated = eventually(
        lambda: core.read_namespaced_pod("trainer", namespace),
        lambda p: (c := pod_condition(p, "PodScheduled")) is not None
        and c.reason == "SchedulingGated",
        timeout=30, what="PodScheduled=False/SchedulingGated")
    assert gated.spec.node_name is None
    time.sleep(2)  # the scheduler has had time to act, and must not have
    assert core.read_namespaced_pod("trainer", namespace).spec.node_name is None

    # The release: one update adds required node affinity and removes the last gate.
    rack = "b0-r1"
    pod = core.read_namespaced_pod("trainer", namespace)
    pod.spec.scheduling_gates = None
    pod.spec.affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [_rack_term(rack)]}}}
    core.replace_namespaced_pod("trainer", namespace, pod)

    running = eventually(
        lambda: core.read_namespaced_pod("trainer", namespace),
        lambda p: p.status.phase == "Running",
        timeout=60, what="the released pod to be bound and Running on a kwok node")
    node = core.read_node(running.spec.node_name)
    assert node.metadata.labels[RACK_LABEL] == rack
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"


def test_apiserver_refuses_readding_a_gate_and_loosening_affinity(
    cluster: E2ECluster, namespace: str
) -> None:
    core = cluster.core
    core.create_namespaced_pod(namespace, pod_manifest("p", gpus=1, gates=(GATE, "other/gate")))

    # While gated, affinity may be set once (it was unset) ...
    pod = core.read_namespaced_pod("p", namespace)
    pod.spec.affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [_rack_term("b0-r0")]}}}
    pod.spec.scheduling_gates = [{"name": "other/gate"}]
    core.replace_namespaced_pod("p", namespace, pod)

    # ... but an existing term may not be replaced by a looser one.
    pod = core.read_namespaced_pod("p", namespace)
    pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
        .node_selector_terms[0].match_expressions[0].values = ["b0-r0", "b0-r1"]
    with pytest.raises(ApiException) as loosen:
        core.replace_namespaced_pod("p", namespace, pod)
    assert loosen.value.status == 422

    # Gates removed are gone for good: adding one back is refused.
    pod = core.read_namespaced_pod("p", namespace)
    pod.spec.scheduling_gates = [{"name": "other/gate"}, {"name": GATE}]
    with pytest.raises(ApiException) as regate:
        core.replace_namespaced_pod("p", namespace, pod)
    assert regate.value.status == 422


def test_gpu_capacity_of_fake_nodes_is_enforced_by_the_scheduler(
    cluster: E2ECluster, namespace: str
) -> None:
    per_node = max(n.gpus for n in cluster.nodes)
    core = cluster.core
    core.create_namespaced_pod(namespace, pod_manifest("too-big", gpus=per_node + 1))
    pod = eventually(
        lambda: core.read_namespaced_pod("too-big", namespace),
        lambda p: (c := pod_condition(p, "PodScheduled")) is not None
        and c.reason == "Unschedulable",
        timeout=30, what="the scheduler to report the oversized pod Unschedulable")
    assert GPU_RESOURCE in pod_condition(pod, "PodScheduled").message
