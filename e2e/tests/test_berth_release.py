"""Berth end to end: ``berth serve`` (webhook + batch controller) on the real control plane,
running as its service account with the RBAC of config/base.

A Job's pods are gated at creation, decided together in a batch window, released with their
placement written on them, bound by kube-scheduler inside the domain the policy asked for, and
run by kwok. A gang that cannot fit waits whole, with nothing of it bound.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.controller.records import CONFIG_MAP, KEY
from admission.devcluster.nodes import TOPOLOGY_LABELS
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster, drop_namespace, make_namespace
from e2e.helpers import eventually, pod_manifest
from e2e.rbac import install_rbac, service_account_kubeconfig, uninstall_rbac
from solver.records import Records

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

RACK = TOPOLOGY_LABELS["rack"]


@pytest.fixture
def berth(cluster: E2ECluster, tenant_namespaces: dict[str, str],
          tmp_path: Path) -> Iterator[BerthWebhook]:
    """``berth serve`` as deployed: the ``berth`` service account of its own namespace with
    exactly the permissions of config/base/rbac.yaml, enforced by the real RBAC authorizer."""
    assert cluster.local is not None
    home = make_namespace(cluster.core, "berth-system")
    created = install_rbac(cluster.api, home, suffix=home)
    try:
        kubeconfig = service_account_kubeconfig(
            cluster.api, server=cluster.local.server, ca_pem=cluster.ca_bundle_pem(),
            namespace=home, account="berth", out=tmp_path / "berth-sa.kubeconfig")
        # The identity really is restricted: reading Secrets is not among its rules.
        as_berth = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        with pytest.raises(ApiException) as denied:
            as_berth.list_namespaced_secret(home)
        assert denied.value.status == 403
        with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                           kubeconfig=kubeconfig, lease_namespace=home) as hook:
            yield hook
            forbidden = [line for line in hook.log.read_text(errors="replace").splitlines()
                         if "forbidden" in line.lower()]
            assert not forbidden, "berth serve was refused by RBAC:\n" + "\n".join(forbidden)
    finally:
        uninstall_rbac(cluster.api, created)
        drop_namespace(cluster.api, home)


def _job(name: str, *, pods: int, gpus: int, topology: str) -> dict[str, Any]:
    template = pod_manifest("unused", gpus=gpus)
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {
                         c.ANNOTATION_GANG_SIZE: str(pods), c.ANNOTATION_TOPOLOGY: topology}},
                         "spec": template["spec"]}}}


def _pods(cluster: E2ECluster, ns: str, job: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items)


def _log_tail(hook: BerthWebhook) -> str:
    return "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])


def test_a_gang_is_released_whole_into_one_rack_and_runs(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    client.BatchV1Api(cluster.api).create_namespaced_job(
        ns, _job("ring", pods=2, gpus=8, topology="required:rack"))
    # kwok runs a Job's pods and, their restartPolicy being Never, completes them at once:
    # Running or Succeeded both mean kube-scheduler bound the pod and its "kubelet" ran it.
    try:
        pods = eventually(lambda: _pods(cluster, ns, "ring"),
                          lambda ps: len(ps) == 2 and all(
                              p.status.phase in ("Running", "Succeeded") for p in ps),
                          timeout=120, what="both gang pods released, bound and run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    racks = {cluster.core.read_node(p.spec.node_name).metadata.labels[RACK] for p in pods}
    assert len(racks) == 1, f"gang split across racks {racks}"
    for p in pods:
        assert not p.spec.scheduling_gates
        assert p.metadata.annotations.get(c.ANNOTATION_ASSIGNED_NODE) == p.spec.node_name


def test_a_gang_that_cannot_fit_waits_whole(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    # 3 x 8 GPUs inside one rack, where a rack holds 2 x 8: never placeable as asked.
    ns = tenant_namespaces["team-a"]
    client.BatchV1Api(cluster.api).create_namespaced_job(
        ns, _job("too-wide", pods=3, gpus=8, topology="required:rack"))
    eventually(lambda: _pods(cluster, ns, "too-wide"), lambda ps: len(ps) == 3,
               timeout=60, what="the Job controller to create 3 pods")
    time.sleep(8)  # four batch windows of this policy: nothing of the gang may move
    pods = _pods(cluster, ns, "too-wide")
    assert len(pods) == 3
    for p in pods:
        assert [g.name for g in p.spec.scheduling_gates or []] == [c.SCHEDULING_GATE], \
            f"{p.metadata.name} lost its gate\n--- berth serve log:\n{_log_tail(berth)}"
        assert p.spec.node_name is None


def test_fractional_pods_share_gpus_as_planned_and_their_env_reads_the_assignment(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    for i in range(4):
        cluster.core.create_namespaced_pod(
            ns, pod_manifest(f"half-{i}", annotations={c.ANNOTATION_FRACTION: "0.5"}))
    try:
        pods = eventually(lambda: cluster.core.list_namespaced_pod(ns).items,
                          lambda ps: len(ps) == 4 and all(p.status.phase == "Running"
                                                          for p in ps),
                          timeout=120, what="four half-GPU pods released, bound and Running")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    per_gpu: dict[tuple[str, str], int] = {}
    for p in pods:
        ann = p.metadata.annotations
        assert ann[c.ANNOTATION_ASSIGNED_NODE] == p.spec.node_name
        gpus = ann[c.ANNOTATION_ASSIGNED_GPUS].split(",")
        milli = [int(m) for m in ann[c.ANNOTATION_ASSIGNED_GPU_MILLI].split(",")]
        assert len(gpus) == len(milli) == 1 and milli == [500]
        key = (p.spec.node_name, gpus[0])
        per_gpu[key] = per_gpu.get(key, 0) + milli[0]
        # The container reads its assignment from these annotations through the downward
        # API, which the kubelet resolves at start (kwok has no containers to show it).
        env = {e.name: e.value_from.field_ref.field_path
               for e in p.spec.containers[0].env or [] if e.value_from}
        assert env[c.ENV_GPU_ASSIGNMENT] == \
            f"metadata.annotations['{c.ANNOTATION_ASSIGNED_GPUS}']"
        assert p.spec.containers[0].resources.limits["nvidia.com/gpu.shared"] == "2"
    assert all(total <= 1000 for total in per_gpu.values()), per_gpu
    assert any(total == 1000 for total in per_gpu.values()), \
        f"no GPU shared by two half pods: {per_gpu}"


def test_tenant_quota_and_borrowing_limit_hold(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    # team-a: quota 16 GPUs, may borrow 8 more of idle quota -> at most 24 GPUs, although the
    # fleet has 32 free. Four single-pod gangs of 8 GPUs: three run, the fourth waits gated.
    ns = tenant_namespaces["team-a"]
    for i in range(4):
        cluster.core.create_namespaced_pod(ns, pod_manifest(f"big-{i}", gpus=8))
    try:
        eventually(lambda: cluster.core.list_namespaced_pod(ns).items,
                   lambda ps: sum(p.status.phase == "Running" for p in ps) == 3,
                   timeout=120, what="three of the four 8-GPU pods to run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    time.sleep(6)  # three more batch windows: the fourth must still wait
    pods = cluster.core.list_namespaced_pod(ns).items
    running = [p for p in pods if p.status.phase == "Running"]
    waiting = [p for p in pods if p.spec.node_name is None]
    assert len(running) == 3 and len(waiting) == 1, [p.metadata.name for p in running]
    assert [g.name for g in waiting[0].spec.scheduling_gates] == [c.SCHEDULING_GATE]


def test_controller_crashes_during_releases_never_leave_a_gang_half_released(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    # The release contract: a gate is removed only once every pod of its gang carries its
    # placement. So at any instant, a gang with an ungated pod has its placement on all pods,
    # whatever moment berth serve is SIGKILLed at; and after restarts every gang is released.
    ns = tenant_namespaces["team-a"]
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    jobs = [f"g{i}" for i in range(3)]
    for name in jobs:
        client.BatchV1Api(cluster.api).create_namespaced_job(
            ns, _job(name, pods=2, gpus=4, topology="required:rack"))
    violations: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            by_gang: dict[str, list[Any]] = {}
            for p in cluster.core.list_namespaced_pod(ns).items:
                by_gang.setdefault(p.metadata.labels.get("job-name", "?"), []).append(p)
            for gang, pods in by_gang.items():
                ungated = [p for p in pods if not p.spec.scheduling_gates]
                placed = [p for p in pods
                          if c.ANNOTATION_ASSIGNED_NODE in (p.metadata.annotations or {})]
                if ungated and len(placed) < len(pods):
                    violations.append(f"{gang}: {len(ungated)} ungated, "
                                      f"{len(placed)}/{len(pods)} placed")
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.2, 3.0))
            berth.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            berth.start()
        pods = eventually(
            lambda: [p for j in jobs for p in _pods(cluster, ns, j)],
            lambda ps: len(ps) == 6 and all(p.spec.node_name for p in ps),
            timeout=180, what=f"every gang released after the crashes (seed {seed})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    finally:
        done.set()
        watcher.join(timeout=5)
    assert not violations, f"seed {seed}: half-released gangs seen: {violations[:5]}"
    for job in jobs:
        racks = {cluster.core.read_node(p.spec.node_name).metadata.labels[RACK]
                 for p in pods if p.metadata.labels["job-name"] == job}
        assert len(racks) == 1, f"{job} split across racks {racks} (seed {seed})"


def test_the_leaders_records_are_saved_and_a_restarted_leader_reads_them_back(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    """Fair share over time survives a restart: the leader saves its records to the
    ConfigMap ``berth-records`` in its own namespace (with only config/base/rbac.yaml's
    rights: the fixture fails on any refusal), and the next leader reads them back."""
    ns = tenant_namespaces["team-a"]
    home = berth.argv[berth.argv.index("--namespace") + 1]
    client.BatchV1Api(cluster.api).create_namespaced_job(
        ns, _job("held", pods=1, gpus=4, topology="preferred:rack"))

    def form() -> Records | None:
        try:
            cm = cluster.core.read_namespaced_config_map(CONFIG_MAP, home)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return Records.loads(cm.data[KEY])

    try:
        saved = eventually(form, lambda r: r is not None and r.usage is not None
                           and r.usage.past("team-a")[1] > 0, timeout=60,
                           what="the leader to save team-a's fair share in its records")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    assert saved is not None and saved.usage is not None
    berth.kill()
    berth.start()
    eventually(lambda: berth.log.read_text(errors="replace"),
               lambda text: "records: restored from ConfigMap" in text, timeout=60,
               what="the restarted leader to read its records back")
    said = [line for line in berth.log.read_text(errors="replace").splitlines()
            if "records:" in line and "restored" not in line]
    assert not said, said  # never refused, unreadable or a failed save
