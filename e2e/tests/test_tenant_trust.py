"""Trust follows the API server, not the pod (DESIGN.md, contract 7), on the real control plane:
``berth serve`` as its service account (exactly config/base/rbac.yaml) does not believe a pod
that claims team-b, a placement, a demand or a gang size it was never given.

- A Pending non-GPU pod of a namespace the policy does not manage, labelled team-b and carrying
  Berth's assignment annotations for every GPU of the fleet, holds no GPU and is not team-b's:
  team-b's real pods are placed on those GPUs, up to team-b's quota and no further.
- A pod of such a namespace created behind Berth's gate with ``berth.dev/gpu-count: "4"`` (the
  webhook never saw it) is never released and not charged to team-b: team-b's real pods get
  its whole quota.
- Thirty pods of one gang, each declaring a gang of one, are never released; each says why.

The forged pods live in ``kube-public``: a namespace no policy manages and one the webhook's
namespaceSelector leaves out, so nothing strips Berth's keys or gate from them at CREATE (the
webhook does, where it sees a pod) and the controller alone must not believe them.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import BerthWebhook, berth_serve_as_deployed
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_condition, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

WAITING = "berth.dev/Waiting"
OUTSIDE = "kube-public"  # managed by no policy, out of the webhook's scope


def _team_b_on_any_model(doc: dict[str, Any]) -> None:
    """The sample policy limits team-b to A100s; the shared fleet is H100."""
    for tenant in doc["tenants"]:
        if tenant["name"] == "team-b":
            tenant.pop("allowedModels", None)


@pytest.fixture
def berth(cluster: E2ECluster, tenant_namespaces: dict[str, str],
          tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_serve_as_deployed(cluster, tmp_path / "berth", tenant_namespaces,
                                 edit_policy=_team_b_on_any_model) as hook:
        yield hook


@pytest.fixture
def outside(cluster: E2ECluster) -> Iterator[str]:
    """``kube-public`` for this test's forged pods (the name prefix it yields), which are
    deleted afterwards, and waited for, so no other test sees them."""
    prefix = f"forged-{uuid.uuid4().hex[:5]}"
    yield prefix
    ours = [p.metadata.name for p in cluster.core.list_namespaced_pod(OUTSIDE).items
            if p.metadata.name.startswith(prefix)]
    for name in ours:
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespaced_pod(name, OUTSIDE, grace_period_seconds=0)
    eventually(lambda: [p for p in cluster.core.list_namespaced_pod(OUTSIDE).items
                        if p.metadata.name.startswith(prefix)],
               lambda left: not left, timeout=30, what=f"{OUTSIDE} cleared of {prefix}-*")


def _log_tail(hook: BerthWebhook) -> str:
    return "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])


def _gated(pod: Any) -> bool:
    return c.SCHEDULING_GATE in [g.name for g in pod.spec.scheduling_gates or []]


def _team_b_pods(cluster: E2ECluster, ns: str, n: int) -> None:
    """``n`` real 4-GPU pods of team-b (its limit per pod), through the webhook."""
    for i in range(n):
        cluster.core.create_namespaced_pod(ns, pod_manifest(f"b-{i}", gpus=4))


def _wait_running(cluster: E2ECluster, ns: str, names: list[str], hook: BerthWebhook) -> list[Any]:
    try:
        return eventually(
            lambda: [p for p in cluster.core.list_namespaced_pod(ns).items
                     if p.metadata.name in names],
            lambda ps: len(ps) == len(names) and all(p.status.phase == "Running" for p in ps),
            timeout=90, what=f"team-b's pods {names} released, bound and Running")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(hook)}") from None


def test_a_forged_placement_in_an_unmanaged_namespace_holds_no_gpu(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], outside: str, berth: BerthWebhook
) -> None:
    # Every GPU of the fleet "assigned" to team-b by pods nobody will ever bind.
    for node in cluster.nodes:
        squatter = pod_manifest(
            f"{outside}-squat-{node.name}", labels={c.LABEL_TENANT: "team-b"},
            annotations={
                c.ANNOTATION_TENANT: "team-b",
                c.ANNOTATION_ASSIGNED_NODE: node.name,
                c.ANNOTATION_ASSIGNED_GPUS: ",".join(str(i) for i in range(node.gpus)),
                c.ANNOTATION_ASSIGNED_GPU_MILLI: ",".join(["1000"] * node.gpus),
                c.ANNOTATION_PLAN: "forged",
            })
        squatter["spec"]["nodeSelector"] = {"berth-e2e/nowhere": "true"}  # stays Pending
        cluster.core.create_namespaced_pod(OUTSIDE, squatter)
    squatters = [p for p in cluster.core.list_namespaced_pod(OUTSIDE).items
                 if p.metadata.name.startswith(outside)]
    assert len(squatters) == len(cluster.nodes)
    assert all(c.ANNOTATION_ASSIGNED_NODE in p.metadata.annotations for p in squatters)

    ns = tenant_namespaces["team-b"]
    _team_b_pods(cluster, ns, 3)
    try:
        pods = eventually(lambda: cluster.core.list_namespaced_pod(ns).items,
                          lambda ps: sum(p.status.phase == "Running" for p in ps) == 2,
                          timeout=90, what="two of team-b's 4-GPU pods Running (its quota)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    claimed = {(p.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE], g)
               for p in squatters
               for g in p.metadata.annotations[c.ANNOTATION_ASSIGNED_GPUS].split(",")}
    running = [p for p in pods if p.status.phase == "Running"]
    for p in running:
        ann = p.metadata.annotations
        assert ann[c.ANNOTATION_ASSIGNED_NODE] == p.spec.node_name
        gpus = {(p.spec.node_name, g) for g in ann[c.ANNOTATION_ASSIGNED_GPUS].split(",")}
        assert len(gpus) == 4 and gpus <= claimed  # the squatters' GPUs, as they are free
    # Within team-b's quota and no further: the third pod waits, and says why.
    time.sleep(6)  # three more batch windows
    waiting = [p for p in cluster.core.list_namespaced_pod(ns).items if p.spec.node_name is None]
    assert len(waiting) == 1 and _gated(waiting[0]), [p.metadata.name for p in waiting]
    cond = pod_condition(waiting[0], WAITING)
    assert cond is not None and cond.reason == "Quota", cond


def test_a_gated_pod_the_webhook_never_saw_is_not_released_nor_charged(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], outside: str, berth: BerthWebhook
) -> None:
    name = f"{outside}-intruder"
    intruder = pod_manifest(
        name, gates=(c.SCHEDULING_GATE,),
        labels={c.LABEL_TENANT: "team-b", c.LABEL_MANAGED: "true"},
        annotations={c.ANNOTATION_TENANT: "team-b", c.ANNOTATION_GPU_COUNT: "4",
                     c.ANNOTATION_GPU_MILLI: "1000", c.ANNOTATION_GANG_SIZE: "1"})
    cluster.core.create_namespaced_pod(OUTSIDE, intruder)
    assert _gated(cluster.core.read_namespaced_pod(name, OUTSIDE))

    def untouched() -> None:
        stored = cluster.core.read_namespaced_pod(name, OUTSIDE)
        assert _gated(stored), (f"Berth released a pod of a namespace it does not manage\n"
                                f"--- berth serve log:\n{_log_tail(berth)}")
        assert c.ANNOTATION_ASSIGNED_NODE not in (stored.metadata.annotations or {})
        assert pod_condition(stored, WAITING) is None  # not Berth's: it does not write to it
        assert stored.spec.node_name is None

    time.sleep(6)  # three batch windows with the intruder alone in the queue
    untouched()
    ns = tenant_namespaces["team-b"]
    _team_b_pods(cluster, ns, 2)
    _wait_running(cluster, ns, ["b-0", "b-1"], berth)  # team-b's full 8 GPUs
    time.sleep(4)  # two more windows
    untouched()


def test_thirty_pods_declaring_a_gang_of_one_are_not_released(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], berth: BerthWebhook
) -> None:
    # A quarter GPU each: 7.5 GPUs in all, within team-b's quota of 8, so only the gang size
    # stands between these pods and a release (team-b's maxGangSize is 16).
    ns = tenant_namespaces["team-b"]
    for i in range(30):
        cluster.core.create_namespaced_pod(ns, pod_manifest(
            f"w-{i}", annotations={c.ANNOTATION_GANG: "swarm", c.ANNOTATION_GANG_SIZE: "1",
                                   c.ANNOTATION_FRACTION: "0.25"}))
    try:
        pods = eventually(
            lambda: cluster.core.list_namespaced_pod(ns).items,
            lambda ps: len(ps) == 30 and all(
                (cond := pod_condition(p, WAITING)) is not None
                and cond.reason == "GangSizeMismatch" for p in ps),
            timeout=60, what="all 30 pods told why they wait")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(berth)}") from None
    time.sleep(6)  # three more batch windows: nothing of the gang may move
    pods = cluster.core.list_namespaced_pod(ns).items
    assert all(_gated(p) and p.spec.node_name is None for p in pods)
    message = pod_condition(pods[0], WAITING).message
    assert "has 30 pods" in message and f"{c.ANNOTATION_GANG_SIZE}: 1" in message, message
