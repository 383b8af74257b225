"""The head-to-head harness's kwok stages on the pinned kwok (e2e/bench_compare.py
``kwok_pod_stages``), checked before any figure leans on them: a Job's pod runs for the time its
annotation gives and ends Succeeded; a Job pod that is evicted ends Failed at once (as the
kubelet stops a deleted pod's containers), is deleted, and its Job makes it again, counting the
failure unless the Job's podFailurePolicy ignores disruptions (``--ignore-disruptions``).

Without the harness's own terminate stage an evicted Job pod kept running until its run time
and then counted as Succeeded: an eviction freed nothing (runs 1-14 of e2e/bench_compare.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from e2e import bench_compare as bc
from e2e.helpers import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="checks the stages of the harness's own local control plane; "
                       "against an existing cluster no local control plane is started"),
]

NS = "stages"
RUN_S = 30.0  # long enough that an eviction ends the pod well before its run would


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    work = Path(tmp_path_factory.mktemp("stages"))
    cluster = bc.DevCluster(workdir=work / "cluster", kwok_stages=bc.kwok_pod_stages())
    cluster.start()
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        bc.create_nodes(core, [bc.FakeGpuNode(
            name="stage-node", gpus=8, gpu_product="A100", gpu_memory_mib=81920,
            nvlink_domains=1, topology={}, cpu="64", memory="512Gi", pods="110")])
        core.create_namespace({"metadata": {"name": NS}})
        yield api
    finally:
        cluster.stop()


def _job(name: str, *, run_s: float, ignore: bool) -> dict[str, Any]:
    g = bc.ReplayGang(name=name, tenant=NS, pods=1, gpus=1, cpu_milli=1000, memory_mib=1024,
                      models=(), arrival_s=0.0, duration_s=run_s)
    job = bc.job_manifest(g, deadline_factor=3.0, ignore_disruptions=ignore)
    job["spec"]["template"]["spec"]["nodeName"] = "stage-node"  # no scheduler needed
    return job


def _pods(core: client.CoreV1Api, job: str) -> list[Any]:
    return core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items


def _uncounted(status: Any) -> bool:
    """Whether the Job controller still holds finished pods it has not counted yet."""
    left = status.uncounted_terminated_pods
    return bool(left and (left.failed or left.succeeded))


def test_a_job_pod_runs_its_time_and_succeeds(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(NS, _job("runs", run_s=3.0, ignore=False))
    started = time.monotonic()
    eventually(lambda: batch.read_namespaced_job("runs", NS).status,
               lambda st: (st.succeeded or 0) == 1, timeout=30, what="the Job completes")
    assert time.monotonic() - started >= 2.5  # ran its time, not ended at once


@pytest.mark.parametrize("ignore", [True, False], ids=["ignore-disruptions", "counted"])
def test_an_evicted_job_pod_ends_failed_and_its_job_makes_it_again(
        api: client.ApiClient, ignore: bool) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    name = f"evicted-{'ignore' if ignore else 'counted'}"
    batch.create_namespaced_job(NS, _job(name, run_s=RUN_S, ignore=ignore))
    first = eventually(lambda: [p for p in _pods(core, name) if p.status.phase == "Running"],
                       bool, timeout=60, what="the pod runs")[0]
    pod = first.metadata.name
    core.create_namespaced_pod_eviction(pod, NS, {"metadata": {"name": pod, "namespace": NS}})
    evicted_at = time.monotonic()
    # the evicted pod is gone (Failed, its finalizer removed by the Job, deleted), long before
    # its run time would have ended it
    eventually(lambda: {p.metadata.name for p in _pods(core, name)}, lambda names: pod not in names,
               timeout=RUN_S / 2, what=f"evicted pod {pod} is deleted")
    assert time.monotonic() - evicted_at < RUN_S / 2
    # The Job controller counts a finished pod in two steps: its uid under
    # uncountedTerminatedPods (before the finalizer goes), then in failed or succeeded. Read
    # the counts once nothing is left uncounted (one CI run caught the first step).
    status = eventually(lambda: batch.read_namespaced_job(name, NS).status,
                        lambda st: not _uncounted(st), timeout=30,
                        what="the Job to count the evicted pod")
    assert (status.succeeded or 0) == 0, "the evicted pod counted as a success"
    assert (status.failed or 0) == (0 if ignore else 1), status
    # and its Job makes it again (after its back-off where the failure counts)
    again = eventually(lambda: [p for p in _pods(core, name) if p.metadata.name != pod],
                       bool, timeout=45, what="a replacement pod")
    assert again[0].metadata.deletion_timestamp is None
