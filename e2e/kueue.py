"""The real Kueue manager beside the cluster under test, for one test at a time.

What it takes to run Kueue as a process (its CRDs, its webhooks rewritten to a 127.0.0.1 URL
and scoped to the test's namespaces, the /etc overlay for its metrics certificate) lives in
:mod:`admission.devcluster.kueue`, shared with ``berth dev-cluster up --with-berth --backend
kueue``; here it is wrapped in context managers that undo everything after the test.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from admission.devcluster import kueue as dk
from admission.devcluster import processes
from admission.devcluster.kueue import KUEUE_API, KUEUE_NAMESPACE, install_crds, webhook_configs
from e2e.conftest import E2ECluster

__all__ = ["KUEUE_API", "KUEUE_NAMESPACE", "gpu_queues", "install_crds", "kueue_manager",
           "webhook_configs"]


@contextmanager
def kueue_manager(cluster: E2ECluster, workdir: Path, namespace: str | Sequence[str], *,
                  frameworks: Sequence[str] = ("batch/job",), fair_sharing: bool = False,
                  feature_gates: Mapping[str, bool] | None = None
                  ) -> Iterator[processes.ProcessRecord]:
    """Run Kueue's manager for ``frameworks`` (its integrations: "batch/job", "pod") in
    ``namespace`` (one or several) until the block ends; ``fair_sharing`` and
    ``feature_gates`` as in :func:`admission.devcluster.kueue.start_manager`."""
    assert cluster.local is not None
    manager = dk.start_manager(cluster.api, processes.spawner(workdir), pki=cluster.local.pki,
                               kubeconfig=cluster.kubeconfig, workdir=workdir,
                               namespace=namespace, frameworks=frameworks,
                               fair_sharing=fair_sharing, feature_gates=feature_gates)
    try:
        yield manager.record
    finally:
        dk.stop_manager(cluster.api, manager)


@contextmanager
def gpu_queues(cluster: E2ECluster, namespace: str, queue: str, gpus: int) -> Iterator[None]:
    """A ResourceFlavor, a ClusterQueue with ``gpus`` GPUs (and room in CPU and memory) and the
    LocalQueue ``queue`` in ``namespace`` pointing at it, for the block; removed afterwards.
    Names carry the namespace's suffix so tests side by side do not collide."""
    suffix = namespace[-5:]
    made = dk.create_gpu_queue(cluster.api, dk.GpuQueue(
        cluster_queue=f"cq-{suffix}", flavor=f"gpu-{suffix}", gpus=gpus, local=queue,
        namespaces=(namespace,)))
    try:
        yield
    finally:
        dk.delete_gpu_queue(cluster.api, made)
