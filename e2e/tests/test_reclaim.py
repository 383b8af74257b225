"""Reclaim on the real control plane (docs/reclaim.md): a tenant waiting within its own quota
takes back the GPUs another tenant borrowed. The borrowed gang is evicted whole through the
Eviction API, its pods carry the DisruptionTarget condition and an Event naming the tenant that
reclaimed, its owner recreates the pods, which come back through the webhook gated, wait while
the quota is not theirs, and are placed once it is idle again.

The test has an A100 node of its own (8 GPUs; the shared fleet is H100 and the policy allows
only A100). team-a may use 2 GPUs of its own and borrow; team-b owns 6 and may not borrow.
The owner is a ReplicaSet: kwok's built-in stages of the shared cluster complete a Job's pods
at once, so a Job's pods never run long enough to be reclaimed here.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, gpu_node, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"
MIN_RUN_S = 4


def _policy(doc: dict[str, Any]) -> None:
    doc["batch"]["windowSeconds"] = 1.5
    doc["solver"]["timeLimitSeconds"] = 1
    doc["solver"]["reservations"] = {"maxGangs": 0}
    doc["solver"]["reclaim"] = {"enabled": True, "minRuntimeSeconds": MIN_RUN_S,
                                "maxGangsPerWindow": 4}
    for tenant in doc["tenants"]:
        tenant["allowedModels"] = [MODEL]
        if tenant["name"] == "team-a":
            tenant["quota"] = {"gpus": 2}
            tenant["borrowing"] = {"enabled": True}
        else:
            tenant["quota"] = {"gpus": 6}
            tenant["borrowing"] = {"enabled": False}


@pytest.fixture
def a100_node(cluster: E2ECluster) -> Iterator[str]:
    with gpu_node(cluster.core, "rcl", MODEL) as name:
        yield name


def _replica_set(name: str, *, replicas: int, gpus: int) -> dict[str, Any]:
    template = pod_manifest("unused", gpus=gpus)
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": {
                         c.ANNOTATION_GANG: name, c.ANNOTATION_GANG_SIZE: str(replicas)}},
                         "spec": template["spec"]}}}


def _gated(pod: Any) -> bool:
    return any(g.name == c.SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def _live(pods: list[Any]) -> list[Any]:
    return [p for p in pods if p.metadata.deletion_timestamp is None]


class Conditions:
    """Every DisruptionTarget condition a pod of ``namespace`` showed, seen through a watch
    (an evicted pod is gone within moments: reading it afterwards would find nothing)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.seen: dict[str, list[tuple[str, str, str]]] = {}
        self._watch = watch.Watch()
        rv = core.list_namespaced_pod(namespace).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(core, namespace, rv),
                                        daemon=True)
        self._thread.start()

    def _run(self, core: client.CoreV1Api, namespace: str, rv: str) -> None:
        with contextlib.suppress(Exception):
            for ev in self._watch.stream(core.list_namespaced_pod, namespace,
                                         resource_version=rv, timeout_seconds=300):
                pod = ev["object"]
                for cond in pod.status.conditions or []:
                    if cond.type == c.CONDITION_DISRUPTION_TARGET:
                        got = (cond.status, cond.reason or "", cond.message or "")
                        seen = self.seen.setdefault(pod.metadata.name, [])
                        if got not in seen:
                            seen.append(got)

    def stop(self) -> None:
        self._watch.stop()


def _log_tail(hook: BerthWebhook) -> str:
    return "\n".join(hook.log.read_text(errors="replace").splitlines()[-40:])


def _running_gang(core: client.CoreV1Api, ns: str, app: str) -> list[Any]:
    """The two pods of ReplicaSet ``app``'s gang, once both run."""
    return eventually(lambda: _live(core.list_namespaced_pod(
        ns, label_selector=f"app={app}").items),
        lambda ps: len(ps) == 2 and all(p.status.phase == "Running" for p in ps),
        timeout=90, what=f"gang {app} to run")


def _evicted_whole(core: client.CoreV1Api, ns: str, app: str, old: set[str],
                   says: str) -> None:
    """Every pod of ``old`` (the gang of ReplicaSet ``app``) gone, each with an Event of
    Berth's controller saying ``says``."""
    eventually(lambda: {p.metadata.name for p in core.list_namespaced_pod(
        ns, label_selector=f"app={app}").items},
        lambda names: not (names & old), timeout=90,
        what=f"every pod of gang {app} to be evicted")
    events = eventually(lambda: [
        e for e in core.list_namespaced_event(ns).items
        if e.reason == c.EVENT_RECLAIMED and e.involved_object.name in old],
        lambda es: {e.involved_object.name for e in es} == old, timeout=30,
        what="a Reclaimed Event on each evicted pod")
    for e in events:
        assert e.source.component == "berth-controller", e
        assert says in e.message, e.message


def test_a_tenant_within_its_quota_reclaims_a_borrowed_gang_whole(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    a, b = tenant_namespaces["team-a"], tenant_namespaces["team-b"]
    core = cluster.core
    apps = client.AppsV1Api(cluster.api)
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_policy) as hook:
        try:
            # team-a runs 6 GPUs, 4 of them borrowed from team-b's idle quota
            apps.create_namespaced_replica_set(a, _replica_set("borrow", replicas=2, gpus=3))
            first = _running_gang(core, a, "borrow")
            assert {p.spec.node_name for p in first} == {a100_node}
            old = {p.metadata.name for p in first}
            conditions = Conditions(core, a)
            time.sleep(MIN_RUN_S + 1)
            # team-b asks for 4 of its own 6 GPUs; only 2 are free
            core.create_namespaced_pod(b, pod_manifest("reclaimer", gpus=4))
            # the borrowed gang is evicted whole ...
            _evicted_whole(core, a, "borrow", old, "reclaimed by tenant team-b")
            conditions.stop()
            for name in old:
                reasons = {r for status, r, _ in conditions.seen.get(name, [])
                           if status == "True"}
                assert c.REASON_RECLAIM in reasons, (name, conditions.seen)
                msgs = [m for _, r, m in conditions.seen[name] if r == c.REASON_RECLAIM]
                assert all("tenant team-b" in m for m in msgs), msgs
            # ... the reclaiming pod starts in what it freed ...
            reclaimer = eventually(lambda: core.read_namespaced_pod("reclaimer", b),
                                   lambda p: p.status.phase == "Running", timeout=60,
                                   what="the reclaiming pod to run")
            assert reclaimer.spec.node_name == a100_node
            # ... and the owner's new pods come back through the webhook, gated, and wait:
            # team-a's quota lent to it is no longer idle
            again = eventually(lambda: _live(core.list_namespaced_pod(
                a, label_selector="app=borrow").items),
                lambda ps: len(ps) == 2 and not ({p.metadata.name for p in ps} & old),
                timeout=60, what="the ReplicaSet to recreate its pods")
            for p in again:
                assert p.metadata.annotations.get(c.ANNOTATION_GANG_NAME) == "borrow", p.metadata
            time.sleep(6)  # four windows
            for p in core.list_namespaced_pod(a, label_selector="app=borrow").items:
                assert _gated(p), f"{p.metadata.name} released on quota that is not idle"
            # nothing more was evicted: team-b is within its quota
            assert core.read_namespaced_pod("reclaimer", b).metadata.deletion_timestamp is None
            # once team-b's pod is gone, the recreated gang is placed whole
            core.delete_namespaced_pod("reclaimer", b, grace_period_seconds=0)
            placed = eventually(lambda: _live(core.list_namespaced_pod(
                a, label_selector="app=borrow").items),
                lambda ps: len(ps) == 2 and all(
                    not _gated(p) and p.status.phase == "Running" for p in ps),
                timeout=90, what="the recreated gang to be placed and run")
            assert {p.spec.node_name for p in placed} == {a100_node}
        except AssertionError as exc:
            rs = ""
            with contextlib.suppress(ApiException):
                got = apps.read_namespaced_replica_set("borrow", a)
                rs = "; ".join(f"{x.type}: {x.message}" for x in got.status.conditions or [])
            raise AssertionError(f"{exc}\n--- the ReplicaSet says: {rs}\n--- berth serve "
                                 f"log:\n{_log_tail(hook)}") from None
        finally:
            with contextlib.suppress(ApiException):
                apps.delete_namespaced_replica_set("borrow", a)


def _preempting_policy(doc: dict[str, Any]) -> None:
    _policy(doc)
    doc["solver"]["reclaim"] = {"enabled": False, "preemptWithinTenant": True,
                                "minRuntimeSeconds": MIN_RUN_S, "maxGangsPerWindow": 4}
    for tenant in doc["tenants"]:
        tenant["quota"] = {"gpus": 8}


def test_a_higher_priority_gang_preempts_its_own_tenants_gang_whole(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    """Preemption within a tenant (solver.reclaim.preemptWithinTenant): team-a's gang of
    priority 0 runs 6 of the node's 8 GPUs; team-a's pod of priority 5 asking for 4 evicts it
    whole through the Eviction API, its pods say who preempted them, and the new pod runs."""
    a = tenant_namespaces["team-a"]
    core = cluster.core
    apps = client.AppsV1Api(cluster.api)
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_preempting_policy) as hook:
        try:
            apps.create_namespaced_replica_set(a, _replica_set("low", replicas=2, gpus=3))
            first = _running_gang(core, a, "low")
            old = {p.metadata.name for p in first}
            conditions = Conditions(core, a)
            time.sleep(MIN_RUN_S + 1)
            core.create_namespaced_pod(a, pod_manifest(
                "urgent", gpus=4, annotations={c.ANNOTATION_PRIORITY: "5"}))
            _evicted_whole(core, a, "low", old, "preempted within tenant team-a by its gang")
            conditions.stop()
            for name in old:
                msgs = [m for s, r, m in conditions.seen.get(name, [])
                        if s == "True" and r == c.REASON_RECLAIM]
                assert msgs and all("preempted" in m for m in msgs), (name, conditions.seen)
            urgent = eventually(lambda: core.read_namespaced_pod("urgent", a),
                                lambda p: p.status.phase == "Running", timeout=60,
                                what="the higher-priority pod to run")
            assert urgent.spec.node_name == a100_node
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(hook)}") from None
        finally:
            with contextlib.suppress(ApiException):
                apps.delete_namespaced_replica_set("low", a)
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod("urgent", a, grace_period_seconds=0)
