"""The node agent is held to its own node and its own keys (config/agent/node-policy.yaml).

RBAC lets the ``berth-agent`` service account patch every node (config/agent/rbac.yaml): on the
real apiserver, a token of that account bound to a pod on node A - as the kubelet mounts it -
may write the agent's labels and annotations on A, and nothing else: not node B, not another
component's label, not the node's spec. Nobody else is held: an admin still changes B.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from admission.agent import schema
from admission.devcluster.binaries import REPO_ROOT
from e2e.conftest import E2ECluster, drop_namespace, make_namespace
from e2e.helpers import api_refusal, eventually, pod_manifest
from e2e.policies import admission_policies
from e2e.rbac import install_rbac, service_account_kubeconfig, uninstall_rbac

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="needs the local cluster's CA to mint service-account tokens"),
]

AGENT = REPO_ROOT / "config" / "agent"



def _refused(call: Any, *words: str) -> None:
    exc = api_refusal(call)
    assert exc is not None, f"allowed, but the node policy should refuse it ({words})"
    assert exc.status in (403, 422), exc.body
    for word in words:
        assert word in (exc.body or ""), exc.body


def _labels(labels: dict[str, str | None] | None = None,
            annotations: dict[str, str | None] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta}


def test_the_agent_changes_only_its_own_node_and_its_own_keys(
        cluster: E2ECluster, tmp_path: Path) -> None:
    assert cluster.local is not None
    core = cluster.core
    home = make_namespace(core, "berth-system")
    created = install_rbac(cluster.api, home, suffix=home, files=(AGENT / "rbac.yaml",))
    own, other = (f"agent-{side}-{home[-5:]}" for side in ("own", "other"))
    for name in (own, other):
        core.create_node({"metadata": {"name": name}})
    try:
        pod = pod_manifest("berth-agent")
        pod["spec"].update(serviceAccountName="berth-agent", nodeName=own)
        bound = core.create_namespaced_pod(home, pod)
        kubeconfig = service_account_kubeconfig(
            cluster.api, server=cluster.local.server, ca_pem=cluster.ca_bundle_pem(),
            namespace=home, account="berth-agent", out=tmp_path / "agent.kubeconfig",
            bound_pod=bound)
        agent = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        # RBAC alone: the agent may relabel any node.
        agent.patch_node(other, _labels({schema.LABEL_AGENT: "v1"}))

        with admission_policies(cluster.api, suffix=home, files=(AGENT / "node-policy.yaml",),
                                param_namespace=home):
            eventually(lambda: api_refusal(lambda: agent.patch_node(
                other, _labels({schema.LABEL_HEALTHY_GPUS: "8"}), dry_run="All")),
                lambda exc: exc is not None and "only the node it runs on" in (exc.body or ""),
                timeout=30, what="the node ValidatingAdmissionPolicy to take effect")

            # Its own node, its own keys (Berth's, GFD's, a MIG profile's), set and removed.
            agent.patch_node(own, _labels(
                {schema.LABEL_AGENT: "v1", schema.GFD_COUNT: "8",
                 schema.gfd_mig_label("1g.10gb", "count"): "7"},
                {schema.ANNOTATION_GPUS: "[]"}))
            agent.patch_node(own, _labels({schema.GFD_COUNT: None}))

            _refused(lambda: agent.patch_node(other, _labels({schema.LABEL_AGENT: "v1"})),
                     "only the node it runs on", own, other)
            _refused(lambda: agent.patch_node(own, _labels({"nvidia.com/mig.config": "all-1g"})),
                     "label nvidia.com/mig.config", "not one of the node agent")
            _refused(lambda: agent.patch_node(own, _labels({"berth.dev/tenant": "team-a"})),
                     "label berth.dev/tenant")
            _refused(lambda: agent.patch_node(own, _labels(annotations={"berth.dev/plan": "x"})),
                     "annotation berth.dev/plan")
            _refused(lambda: agent.patch_node(own, {"spec": {"unschedulable": True}}),
                     "not the node's spec")
            # Nobody else is held: the cluster admin relabels the other node.
            core.patch_node(other, _labels({"team": "x", schema.LABEL_AGENT: None}))

        stored = core.read_node(own).metadata
        assert stored.labels[schema.LABEL_AGENT] == "v1"
        assert schema.GFD_COUNT not in stored.labels
        assert "nvidia.com/mig.config" not in stored.labels
        assert stored.annotations[schema.ANNOTATION_GPUS] == "[]"
        assert not core.read_node(own).spec.unschedulable
    finally:
        for name in (own, other):
            core.delete_node(name)
        uninstall_rbac(cluster.api, created)
        drop_namespace(cluster.api, home)
