"""The apiserver -> mutating webhook path of the cluster under test.

Berth's admission rests on it: a pod CREATE in a managed namespace is sent over TLS to a
webhook at a 127.0.0.1 URL, verified against the caBundle, and the JSONPatch it returns is
applied before the pod is stored. With failurePolicy Fail, an unreachable webhook must make the
create fail, so that no pod is ever stored unscreened.
"""

from __future__ import annotations

import os

import pytest
from kubernetes.client.rest import ApiException

from admission.devcluster.pki import write_serving_pair
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_condition, pod_manifest
from e2e.webhooks import LabellingWebhook, mutating_webhook_config, registered, wait_until_mutating

pytestmark = [
    pytest.mark.e2e,
    # The probe webhook runs inside pytest on 127.0.0.1, which only a process cluster on the
    # same host can call; on kind, Berth's own webhook is deployed by config/ instead.
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="needs the local process cluster (apiserver on this host)"),
]

GATE = "berth.dev/admission"


def test_pod_create_goes_through_a_tls_webhook_and_fails_closed_without_it(
    cluster: E2ECluster, namespace: str
) -> None:
    assert cluster.local is not None
    cert, key = write_serving_pair(cluster.local.pki, cluster.local.workdir / namespace,
                                   cn="e2e-webhook")
    core = cluster.core
    with LabellingWebhook(cert, key, gate=GATE) as hook:
        conf = mutating_webhook_config(
            namespace, url=f"https://127.0.0.1:{hook.port}/mutate-pods",
            ca_pem=cluster.ca_bundle_pem(), namespace=namespace, failure_policy="Fail")
        with registered(cluster.api, conf):
            wait_until_mutating(core, namespace, pod_manifest("probe", gpus=1),
                                lambda p: (p.metadata.labels or {}).get(hook.LABEL) == "true")

            created = core.create_namespaced_pod(namespace, pod_manifest("worker", gpus=1))
            assert created.metadata.labels[hook.LABEL] == "true"
            assert [g.name for g in created.spec.scheduling_gates] == [GATE]
            seen = [r["request"] for r in hook.reviews if r["request"]["name"] == "worker"]
            assert seen and seen[-1]["operation"] == "CREATE"
            assert seen[-1]["namespace"] == namespace
            assert not seen[-1]["dryRun"]

            # The webhook's gate holds the pod back from the scheduler.
            gated = eventually(
                lambda: core.read_namespaced_pod("worker", namespace),
                lambda p: (c := pod_condition(p, "PodScheduled")) is not None
                and c.reason == "SchedulingGated",
                timeout=30, what="the webhook-gated pod to report SchedulingGated")
            assert gated.spec.node_name is None

            hook.close()
            with pytest.raises(ApiException) as refused:
                core.create_namespaced_pod(namespace, pod_manifest("unscreened", gpus=1))
            assert refused.value.status == 500
            assert "failed calling webhook" in refused.value.body
            names = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
            assert "unscreened" not in names
