"""Berth in front of the real Volcano scheduler (``release.backend: volcano``).

Berth's webhook sets ``schedulerName: volcano`` and the PodGroup and queue annotations at
CREATE (the scheduler name cannot change later). At release ``berth serve`` creates the gang's
PodGroup (``minMember`` = gang size, the tenant's Volcano Queue), writes each pod's placement
and lifts its gate; Volcano then binds the gang whole, on the nodes Berth chose. A gang Berth
cannot place keeps its gate on every pod: no PodGroup, nothing bound.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster.nodes import TOPOLOGY_LABELS
from admission.devcluster.processes import ProcessRecord
from e2e.berth import BerthWebhook, berth_serve_as_deployed
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest
from e2e.volcano import volcano_scheduler

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts vc-scheduler and berth serve on this host"),
]

VC = "scheduling.volcano.sh/v1beta1"
RACK = TOPOLOGY_LABELS["rack"]


@pytest.fixture
def queue(cluster: E2ECluster, tenant_namespaces: dict[str, str]) -> Iterator[str]:
    """team-a's Volcano Queue (cluster-scoped, so named after the test's namespace)."""
    name = f"q-{tenant_namespaces['team-a'][-5:]}"
    yield name
    queues = dynamic.DynamicClient(cluster.api).resources.get(api_version=VC, kind="Queue")
    try:
        queues.delete(name=name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def volcano(cluster: E2ECluster, queue: str, tmp_path: Path) -> Iterator[ProcessRecord]:
    with volcano_scheduler(cluster, tmp_path / "volcano") as record:
        queues = dynamic.DynamicClient(cluster.api).resources.get(api_version=VC, kind="Queue")
        queues.create(body={"apiVersion": VC, "kind": "Queue", "metadata": {"name": queue},
                            "spec": {"weight": 1, "reclaimable": True}})
        yield record


@pytest.fixture
def berth(cluster: E2ECluster, tenant_namespaces: dict[str, str], queue: str,
          volcano: ProcessRecord, tmp_path: Path) -> Iterator[BerthWebhook]:
    def to_volcano(doc: dict[str, Any]) -> None:
        doc["release"] = {"backend": "volcano"}
        for tenant in doc["tenants"]:
            if tenant["name"] == "team-a":
                tenant["queues"]["volcano"] = queue

    with berth_serve_as_deployed(cluster, tmp_path / "berth", tenant_namespaces,
                                 components=("volcano",), edit_policy=to_volcano) as hook:
        yield hook


def _gang(name: str, i: int, *, size: int, gpus: int, topology: str) -> dict[str, Any]:
    return pod_manifest(f"{name}-{i}", gpus=gpus, annotations={
        c.ANNOTATION_GANG: name, c.ANNOTATION_GANG_SIZE: str(size),
        c.ANNOTATION_TOPOLOGY: topology})


def _pod_groups(cluster: E2ECluster, ns: str) -> list[Any]:
    res = dynamic.DynamicClient(cluster.api).resources.get(api_version=VC, kind="PodGroup")
    return list(res.get(namespace=ns).items)


def _logs(berth: BerthWebhook, volcano: ProcessRecord) -> str:
    def tail(path: Path) -> str:
        return "\n".join(path.read_text(errors="replace").splitlines()[-25:])
    return (f"\n--- berth serve log:\n{tail(berth.log)}"
            f"\n--- vc-scheduler log:\n{tail(Path(volcano.log))}")


def _members(core: client.CoreV1Api, ns: str, gang: str) -> list[Any]:
    return [p for p in core.list_namespaced_pod(ns).items
            if p.metadata.name.startswith(f"{gang}-")]


def test_volcano_binds_the_gang_whole_where_berth_placed_it(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], queue: str,
    volcano: ProcessRecord, berth: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    made = [core.create_namespaced_pod(ns, _gang("ring", i, size=2, gpus=8,
                                                 topology="required:rack"))
            for i in range(2)]
    # As stored at CREATE: Berth's webhook set what Volcano reads, and its gate holds the pod.
    for p in made:
        assert p.spec.scheduler_name == c.VOLCANO_SCHEDULER
        assert [g.name for g in p.spec.scheduling_gates or []] == [c.SCHEDULING_GATE]
        ann = p.metadata.annotations
        assert ann[c.VOLCANO_GROUP_ANNOTATION] == p.metadata.labels[c.LABEL_GANG]
        assert ann[c.VOLCANO_QUEUE_ANNOTATION] == queue
    group = made[0].metadata.annotations[c.VOLCANO_GROUP_ANNOTATION]
    try:
        pods = eventually(lambda: _members(core, ns, "ring"),
                          lambda ps: len(ps) == 2 and all(p.status.phase == "Running"
                                                          for p in ps),
                          timeout=120, what="Volcano to bind the released gang and kwok to run it")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth, volcano)}") from None
    groups = {g.metadata.name: g for g in _pod_groups(cluster, ns)}
    assert set(groups) == {group}, sorted(groups)
    assert groups[group].spec.minMember == 2
    assert groups[group].spec.queue == queue
    for p in pods:
        assert not p.spec.scheduling_gates
        assert p.spec.node_name == p.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE], \
            f"{p.metadata.name} bound to {p.spec.node_name}, Berth placed it elsewhere"
    racks = {core.read_node(p.spec.node_name).metadata.labels[RACK] for p in pods}
    assert len(racks) == 1, f"gang split across racks {racks}"
    # Volcano, not kube-scheduler, bound them: its PodGroup saw the whole gang run.
    eventually(lambda: _pod_groups(cluster, ns)[0].status,
               lambda st: st is not None and st.get("phase") == "Running"
               and st.get("running", 0) == 2,
               timeout=30, what="the PodGroup to report the gang Running")


def test_a_gang_that_does_not_fit_is_held_whole(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], queue: str,
    volcano: ProcessRecord, berth: BerthWebhook
) -> None:
    # 3 x 8 GPUs inside one rack, where a rack holds 2 x 8: Berth never releases any of it,
    # so Volcano never sees a PodGroup for it and binds nothing.
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    for i in range(3):
        core.create_namespaced_pod(ns, _gang("wide", i, size=3, gpus=8,
                                             topology="required:rack"))
    time.sleep(8)  # four batch windows and many Volcano sessions (1 s each)
    pods = _members(core, ns, "wide")
    assert len(pods) == 3
    for p in pods:
        assert [g.name for g in p.spec.scheduling_gates or []] == [c.SCHEDULING_GATE], \
            f"{p.metadata.name} lost its gate{_logs(berth, volcano)}"
        assert p.spec.node_name is None
    assert _pod_groups(cluster, ns) == []


def _waiting(pod: Any) -> Any:
    return next((cnd for cnd in pod.status.conditions or []
                 if cnd.type == "berth.dev/Waiting"), None)


def _events(core: client.CoreV1Api, ns: str, pod: str, reason: str) -> list[Any]:
    return [e for e in core.list_namespaced_event(ns).items
            if e.involved_object.name == pod and e.reason == reason]


def test_a_gang_volcano_refuses_stays_whole_and_berth_says_why(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], queue: str,
    volcano: ProcessRecord, berth: BerthWebhook
) -> None:
    """Berth admits a gang that its Volcano queue cannot take (the queue is capped at 8 GPUs,
    the gang needs 2 x 8): what a user should see.

    - Berth releases the gang as usual (its own quota allows it): gates lifted, each pod pinned
      to the node Berth chose, the PodGroup (minMember 2) in the tenant's queue.
    - Volcano binds none of it: all of a gang or nothing. No pod is lost: both stay Pending,
      unbound, pinned to Berth's nodes; nothing deletes them.
    - Berth does not stay silent: once a released pod has gone unbound for its grace (30 s),
      its ``berth.dev/Waiting`` condition turns True with reason ``NotBound``, naming the node
      Berth chose and what Volcano answers, with a Warning Event (``kubectl describe pod``).
    - When the queue's cap is lifted, Volcano binds the gang whole, on Berth's nodes, and
      Berth's condition turns False (``Bound``).
    """
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    queues = dynamic.DynamicClient(cluster.api).resources.get(api_version=VC, kind="Queue")
    queues.patch(name=queue, body={"spec": {"capability": {"nvidia.com/gpu": "8"}}},
                 content_type="application/merge-patch+json")
    for i in range(2):
        core.create_namespaced_pod(ns, _gang("capped", i, size=2, gpus=8,
                                             topology="required:rack"))
    # Released by Berth: no gate left, both pinned, the PodGroup in the capped queue.
    pods = eventually(lambda: _members(core, ns, "capped"),
                      lambda ps: len(ps) == 2 and all(not p.spec.scheduling_gates for p in ps),
                      timeout=60, what="Berth to release the gang")
    placed = {p.metadata.name: p.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE] for p in pods}
    groups = _pod_groups(cluster, ns)
    assert [(g.spec.minMember, g.spec.queue) for g in groups] == [(2, queue)]
    # Refused by Volcano, reported by Berth: each pod NotBound, with a Warning Event.
    try:
        pods = eventually(
            lambda: _members(core, ns, "capped"),
            lambda ps: len(ps) == 2 and all(
                (w := _waiting(p)) is not None and w.reason == "NotBound" for p in ps),
            timeout=90, what="Berth to report the released pods Volcano does not bind")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth, volcano)}") from None
    for p in pods:
        assert p.spec.node_name is None, f"{p.metadata.name} bound past the queue's cap"
        assert p.status.phase == "Pending"
        w = _waiting(p)
        assert w.status == "True"
        assert f"released to node {placed[p.metadata.name]}" in w.message
        # Volcano's own refusal (its PodScheduled condition), not Berth's guess.
        assert "volcano says:" in w.message and "nothing yet" not in w.message, w.message
        print(f"\n{p.metadata.name}: {w.reason}: {w.message}")
        # The Event is written after the condition (its own API call): wait for it too.
        warnings = eventually(lambda name=p.metadata.name: _events(core, ns, name, "NotBound"),
                              lambda ws: bool(ws), timeout=30,
                              what=f"a NotBound Event on {p.metadata.name}")
        assert warnings[0].type == "Warning", warnings
    # The cap lifted: Volcano binds the whole gang where Berth placed it; Berth says Bound.
    queues.patch(name=queue, body={"spec": {"capability": {"nvidia.com/gpu": "64"}}},
                 content_type="application/merge-patch+json")
    try:
        pods = eventually(
            lambda: _members(core, ns, "capped"),
            lambda ps: len(ps) == 2 and all(
                p.status.phase == "Running" and (w := _waiting(p)) is not None
                and (w.status, w.reason) == ("False", "Bound") for p in ps),
            timeout=90, what="Volcano to bind the gang once its queue's cap is lifted")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth, volcano)}") from None
    assert {p.metadata.name: p.spec.node_name for p in pods} == placed
