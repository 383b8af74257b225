"""The real Kueue manager on the local control plane: Jobs flow through a LocalQueue and a
ClusterQueue, are admitted within the GPU quota and run on kwok nodes; a Job beyond the quota
stays suspended with its Workload pending. Two ClusterQueues in one cohort with fair sharing:
quota lent is reclaimed by preemption."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic

from admission.devcluster import kube
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
KUEUE_V1B1 = "kueue.x-k8s.io/v1beta1"  # still served, converted by Kueue's webhook


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


def _cohort_queues(cluster: E2ECluster, namespace: str) -> list[tuple[str, str, str]]:
    """Two ClusterQueues of 8 GPUs in one cohort, reclaiming lent quota by preemption, each
    with a LocalQueue in ``namespace``: cq-a written as v1beta2, cq-b as v1beta1 (``cohort``),
    which Kueue's conversion webhook turns into v1beta2's ``cohortName``."""
    suffix = namespace[-5:]
    made: list[tuple[str, str, str]] = []
    kinds = {k: kube.resource(cluster.api, v, k) for k, v in
             (("ResourceFlavor", KUEUE_V), ("ClusterQueue", KUEUE_V), ("LocalQueue", KUEUE_V))}
    kinds["ClusterQueue-v1beta1"] = kube.resource(cluster.api, KUEUE_V1B1, "ClusterQueue")
    kinds["ResourceFlavor"].create(body={"apiVersion": KUEUE_V, "kind": "ResourceFlavor",
                                         "metadata": {"name": f"gpu-{suffix}"}})
    made.append(("ResourceFlavor", "", f"gpu-{suffix}"))
    for team, version, cohort_key in (("a", KUEUE_V, "cohortName"),
                                      ("b", KUEUE_V1B1, "cohort")):
        resources = [{"name": "cpu", "nominalQuota": "100"},
                     {"name": "memory", "nominalQuota": "100Gi"},
                     {"name": "nvidia.com/gpu", "nominalQuota": "8"}]
        res = kinds["ClusterQueue" if version == KUEUE_V else "ClusterQueue-v1beta1"]
        res.create(body={
            "apiVersion": version, "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{team}-{suffix}"},
            "spec": {cohort_key: f"co-{suffix}", "namespaceSelector": {},
                     "preemption": {"reclaimWithinCohort": "Any",
                                    "withinClusterQueue": "Never"},
                     "fairSharing": {"weight": "1"},
                     "resourceGroups": [{
                         "coveredResources": [r["name"] for r in resources],
                         "flavors": [{"name": f"gpu-{suffix}", "resources": resources}]}]}})
        made.append(("ClusterQueue", "", f"cq-{team}-{suffix}"))
        kinds["LocalQueue"].create(namespace=namespace, body={
            "apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"name": f"lq-{team}"},
            "spec": {"clusterQueue": f"cq-{team}-{suffix}"}})
        made.append(("LocalQueue", namespace, f"lq-{team}"))
    return made


def test_cohort_borrowing_is_reclaimed_by_preemption_with_fair_sharing(
    cluster: E2ECluster, namespace: str, tmp_path: Path
) -> None:
    """Kueue with fair sharing on (v1beta2 configuration): team a borrows team b's idle quota
    through their cohort and runs 16 GPUs; team b's pod takes its nominal 8 back by
    preempting one of team a's (reclaimWithinCohort). A ClusterQueue written in v1beta1 joins
    the cohort through Kueue's conversion webhook."""
    core = cluster.core
    with kueue_manager(cluster, tmp_path / "kueue", namespace, frameworks=("pod",),
                       fair_sharing=True) as record:
        made = _cohort_queues(cluster, namespace)
        try:
            suffix = namespace[-5:]
            cq_b = kube.resource(cluster.api, KUEUE_V, "ClusterQueue").get(
                name=f"cq-b-{suffix}")
            assert cq_b.spec.cohortName == f"co-{suffix}", \
                f"v1beta1 spec.cohort did not convert to v1beta2 cohortName: {cq_b.spec}"

            def pod(name: str, team: str) -> dict[str, Any]:
                return pod_manifest(name, gpus=8,
                                    labels={"kueue.x-k8s.io/queue-name": f"lq-{team}"})

            def running() -> set[str]:
                return {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                        if p.status.phase == "Running" and not p.metadata.deletion_timestamp}

            for name in ("a-0", "a-1"):
                core.create_namespaced_pod(namespace, pod(name, "a"))
            eventually(running, lambda r: r >= {"a-0", "a-1"}, timeout=90,
                       what="team a's two 8-GPU pods to run, 8 GPUs borrowed from team b")
            core.create_namespaced_pod(namespace, pod("b-0", "b"))
            final = eventually(running, lambda r: "b-0" in r and len(r & {"a-0", "a-1"}) == 1,
                               timeout=90, what="team b to reclaim its 8 GPUs by preemption")
            assert len(final) == 2, final
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- kueue log:\n{_log(record)}") from None
        finally:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            eventually(lambda: core.list_namespaced_pod(namespace).items, lambda ps: not ps,
                       timeout=30, what="Kueue to release its pods' finalizers")
            for kind, ns, name in reversed(made):
                res = kube.resource(cluster.api, KUEUE_V, kind)
                res.delete(name=name, **({"namespace": ns} if ns else {}))
