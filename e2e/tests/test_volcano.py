"""The real Volcano scheduler on the local control plane: a PodGroup gates its gang (nothing
binds until all ``minMember`` pods fit) and then every pod binds to a kwok GPU node."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import dynamic

from admission.devcluster.processes import ProcessRecord
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest
from e2e.volcano import volcano_scheduler

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts vc-scheduler on this host"),
]


@pytest.fixture
def volcano(cluster: E2ECluster, tmp_path: Path) -> Iterator[ProcessRecord]:
    with volcano_scheduler(cluster, tmp_path / "volcano") as record:
        yield record


def _pod_group(name: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": {"minMember": min_member, "queue": "default"}}


def _member(name: str, group: str, gpus: int) -> dict[str, Any]:
    pod = pod_manifest(name, gpus=gpus,
                       annotations={"scheduling.k8s.io/group-name": group})
    pod["spec"]["schedulerName"] = "volcano"
    return pod


def _log(record: ProcessRecord) -> str:
    return "\n".join(Path(record.log).read_text(errors="replace").splitlines()[-20:])


def test_pod_group_binds_whole_or_not_at_all(
    cluster: E2ECluster, namespace: str, volcano: ProcessRecord
) -> None:
    groups = dynamic.DynamicClient(cluster.api).resources.get(
        api_version="scheduling.volcano.sh/v1beta1", kind="PodGroup")
    core = cluster.core

    # 3 x 8 GPUs with minMember 3 fits the 4-node fleet; all three must bind.
    groups.create(body=_pod_group("fits", 3), namespace=namespace)
    for i in range(3):
        core.create_namespaced_pod(namespace, _member(f"fits-{i}", "fits", gpus=8))
    try:
        eventually(lambda: core.list_namespaced_pod(namespace).items,
                   lambda ps: len(ps) == 3 and all(p.spec.node_name for p in ps),
                   timeout=90, what="vc-scheduler to bind the whole PodGroup")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- vc-scheduler log:\n{_log(volcano)}") from None

    # 2 more x 8 GPUs with minMember 2, where only one node is left: neither may bind.
    groups.create(body=_pod_group("too-big", 2), namespace=namespace)
    for i in range(2):
        core.create_namespaced_pod(namespace, _member(f"big-{i}", "too-big", gpus=8))
    time.sleep(5)  # several scheduling periods (1 s each)
    waiting = [core.read_namespaced_pod(f"big-{i}", namespace) for i in range(2)]
    assert all(p.spec.node_name is None for p in waiting), \
        f"a gang member bound without its group\n--- vc-scheduler log:\n{_log(volcano)}"
