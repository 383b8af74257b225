"""The real Kueue manager on the local control plane: Jobs flow through a LocalQueue and a
ClusterQueue, are admitted within the GPU quota and run on kwok nodes; a Job beyond the quota
stays suspended with its Workload pending."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic

from admission.devcluster.processes import ProcessRecord
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest
from e2e.kueue import gpu_queues, kueue_manager

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts the Kueue manager on this host"),
]

KUEUE_V = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def kueue(cluster: E2ECluster, namespace: str, tmp_path: Path) -> Iterator[ProcessRecord]:
    with kueue_manager(cluster, tmp_path / "kueue", namespace) as record:
        yield record


def _log(record: ProcessRecord) -> str:
    return "\n".join(Path(record.log).read_text(errors="replace").splitlines()[-25:])


def _job(name: str, queue: str, *, pods: int, gpus: int) -> dict[str, Any]:
    template = pod_manifest("unused", gpus=gpus)
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"spec": template["spec"]}}}


def test_jobs_flow_through_local_and_cluster_queues_within_quota(
    cluster: E2ECluster, namespace: str, kueue: ProcessRecord
) -> None:
    dyn = dynamic.DynamicClient(cluster.api)
    batch = client.BatchV1Api(cluster.api)
    with gpu_queues(cluster, namespace, "lq", 16):
        _jobs_flow(cluster, namespace, kueue, dyn, batch)


def _jobs_flow(cluster: E2ECluster, namespace: str, kueue: ProcessRecord,
               dyn: dynamic.DynamicClient, batch: client.BatchV1Api) -> None:
    try:
        # Kueue's webhook suspends the Job at creation; Kueue admits it and resumes it.
        made = batch.create_namespaced_job(namespace, _job("fits", "lq", pods=2, gpus=8))
        assert made.spec.suspend is True, "Kueue's mutating webhook did not suspend the Job"
        eventually(lambda: cluster.core.list_namespaced_pod(
                       namespace, label_selector="job-name=fits").items,
                   lambda ps: len(ps) == 2 and all(p.status.phase in ("Running", "Succeeded")
                                                   for p in ps),
                   timeout=120, what="the admitted Job's pods to be bound and run")

        # 16 GPUs are in use: a second Job of 8 GPUs stays suspended, its Workload pending.
        batch.create_namespaced_job(namespace, _job("over", "lq", pods=1, gpus=8))
        workloads = dyn.resources.get(api_version=KUEUE_V, kind="Workload")
        pending = eventually(
            lambda: [w for w in workloads.get(namespace=namespace).items
                     if w.metadata.ownerReferences[0].name == "over"],
            lambda ws: bool(ws) and any(c.type == "QuotaReserved" and c.status == "False"
                                        for c in (ws[0].status or {}).get("conditions", [])),
            timeout=60, what="the over-quota Workload to be reported pending")
        assert pending
        assert batch.read_namespaced_job("over", namespace).spec.suspend is True
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- kueue log:\n{_log(kueue)}") from None
    finally:
        batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
