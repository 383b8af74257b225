"""Tenants on the real control plane: weighted fair shares, borrowing of idle quota, hard quotas.

``berth serve`` decides every batch window; what the tests observe is only what the API shows
(which pods Berth released and where kube-scheduler bound them), polled over time. Each test
gets GPU nodes of its own, of a model (A100) that the shared fleet (H100) does not have, and a
policy whose tenants may use only that model: the tenants compete for exactly those 12 GPUs.

The pods are created before those nodes exist, so that every pod of both bursts is pending
when the capacity appears: the first windows then see both tenants' whole backlog, and a
first-come order (all of team-a's pods were created first) would hand team-a everything.
Both tenants have the same priority here: a higher priority outweighs fairness by design.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster import create_nodes
from admission.devcluster.nodes import FakeGpuNode
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"
NODES, GPUS_PER_NODE = 3, 4
CAPACITY = NODES * GPUS_PER_NODE  # 12 GPUs the two tenants compete for
BURST = 20  # single-GPU pods per tenant: far more than fit
WINDOW_SECONDS = 1.5
# Generous: a loaded 2-core machine stretches every window (snapshot, solve, ~12 writes).
SETTLE_TIMEOUT = 180
# "Within a few windows": batch cycles from the nodes' creation to the settled split. Counted
# in cycles, not seconds, so load does not move it (a window can only end later, not split
# the decision into more cycles); one cycle may pass before the inventory sees the nodes.
FEW_WINDOWS = 5


def _tenants(quota: dict[str, float | None], borrow: dict[str, bool]
             ) -> Callable[[dict[str, Any]], None]:
    """Edit the sample policy: weights 2:1 (as the sample has), equal priority, only the
    test's GPU model, the given quotas and borrowing, a short window and solver limit."""
    def edit(doc: dict[str, Any]) -> None:
        doc["batch"]["windowSeconds"] = WINDOW_SECONDS
        doc["solver"]["timeLimitSeconds"] = 1
        for tenant in doc["tenants"]:
            name = tenant["name"]
            tenant["weight"] = {"team-a": 2, "team-b": 1}[name]
            tenant.pop("priority", None)
            tenant["allowedModels"] = [MODEL]
            if quota[name] is None:
                tenant.pop("quota", None)
            else:
                tenant["quota"] = {"gpus": quota[name]}
            tenant["borrowing"] = {"enabled": borrow[name]}
    return edit


@pytest.fixture
def gpu_nodes(cluster: E2ECluster) -> Iterator[Callable[[], list[str]]]:
    """Creates, when called, this test's A100 nodes (3 x 4 GPUs); deletes them afterwards."""
    suffix = uuid.uuid4().hex[:5]
    nodes = [FakeGpuNode(name=f"fair-{suffix}-n{i}", gpus=GPUS_PER_NODE, gpu_product=MODEL,
                         gpu_memory_mib=81920,
                         topology={"block": f"fair-{suffix}", "rack": f"fair-{suffix}"})
             for i in range(NODES)]
    made: list[str] = []

    def create() -> list[str]:
        made.extend(create_nodes(cluster.core, nodes))
        return made

    yield create
    for name in made:
        with contextlib.suppress(ApiException):
            cluster.core.delete_node(name)


def _serve(cluster: E2ECluster, tmp_path: Path, namespaces: dict[str, str],
           edit: Callable[[dict[str, Any]], None]) -> contextlib.AbstractContextManager[
               BerthWebhook]:
    return berth_webhook(cluster, tmp_path / "berth", namespaces, serve=True,
                         edit_policy=edit)


def _burst(cluster: E2ECluster, namespaces: dict[str, str], counts: dict[str, int]) -> None:
    # team-a's whole burst first: a first-come order would favour it.
    for tenant in ("team-a", "team-b"):
        for i in range(counts[tenant]):
            cluster.core.create_namespaced_pod(
                namespaces[tenant], pod_manifest(f"{tenant}-{i}", gpus=1))


def _released(cluster: E2ECluster, namespaces: dict[str, str]) -> dict[str, int]:
    """GPUs per tenant that Berth released (gate opened); every pod here asks for one."""
    out = {}
    for tenant, ns in namespaces.items():
        pods = cluster.core.list_namespaced_pod(ns).items
        out[tenant] = sum(1 for p in pods if not any(
            g.name == c.SCHEDULING_GATE for g in p.spec.scheduling_gates or []))
    return out


class Sampler:
    """Samples the released counts in the background, so that a bound is checked at every
    observed moment, not only at the end."""

    def __init__(self, cluster: E2ECluster, namespaces: dict[str, str]) -> None:
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cluster, namespaces),
                                        daemon=True)

    def _run(self, cluster: E2ECluster, namespaces: dict[str, str]) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiException):
                self.samples.append(_released(cluster, namespaces))
            time.sleep(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _settled(cluster: E2ECluster, namespaces: dict[str, str], hook: BerthWebhook,
             total: int, what: str) -> dict[str, int]:
    """Wait until ``total`` GPUs are released, then three more windows, and return the split
    (which must not have moved meanwhile: nothing more fits)."""
    try:
        first = eventually(lambda: _released(cluster, namespaces),
                           lambda r: sum(r.values()) >= total, timeout=SETTLE_TIMEOUT,
                           what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(hook)}") from None
    time.sleep(3 * WINDOW_SECONDS)
    later = _released(cluster, namespaces)
    assert later == first, f"released more after the capacity was full: {first} -> {later}"
    return later


def _bound_nodes(cluster: E2ECluster, namespaces: dict[str, str]) -> set[str]:
    return {p.spec.node_name for ns in namespaces.values()
            for p in cluster.core.list_namespaced_pod(ns).items if p.spec.node_name}


def _cycles(hook: BerthWebhook, *, releasing: bool = False) -> int:
    """The number of the last batch cycle ``berth serve`` logged (``releasing``: the last
    that released a gang). A cycle logs its line after its releases and requeue."""
    found = [int(n) for n, released in re.findall(
        r"cycle (\d+) \(batch\):.* released=(\d+)", hook.log.read_text(errors="replace"))
        if not releasing or int(released) > 0]
    return found[-1] if found else 0


def _log_tail(hook: BerthWebhook) -> str:
    return "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])


def test_two_tenants_bursting_at_once_share_by_weight_then_idle_capacity_is_borrowed(
    cluster: E2ECluster, gpu_nodes: Callable[[], list[str]],
    tenant_namespaces: dict[str, str], tmp_path: Path
) -> None:
    # Quotas 6 + 6: a quota-proportional split would be 6:6; weights 2:1 ask for 8:4, team-a
    # borrowing 2 of team-b's idle quota.
    edit = _tenants({"team-a": 6, "team-b": 6}, {"team-a": True, "team-b": True})
    with _serve(cluster, tmp_path, tenant_namespaces, edit) as hook:
        _burst(cluster, tenant_namespaces, {"team-a": BURST, "team-b": BURST})
        assert _released(cluster, tenant_namespaces) == {"team-a": 0, "team-b": 0}
        names = gpu_nodes()
        start, before = time.monotonic(), _cycles(hook)
        split = _settled(cluster, tenant_namespaces, hook, CAPACITY,
                         f"both tenants' pods to fill the {CAPACITY} GPUs")
        took = time.monotonic() - start - 3 * WINDOW_SECONDS
        windows = _cycles(hook, releasing=True) - before
        # 8:4 within one gang (one pod here), reached within a few windows.
        assert abs(split["team-a"] - 8) <= 1 and split["team-a"] + split["team-b"] == 12, \
            f"weights 2:1 over 12 GPUs, both backlogged: got {split} after {took:.0f}s"
        print(f"\nweighted split {split} in {windows} batch windows ({took:.1f}s)")
        assert windows <= FEW_WINDOWS, f"the split took {windows} batch windows ({took:.0f}s)"
        assert _bound_nodes(cluster, tenant_namespaces) <= set(names)

        # team-b's work ends and it has nothing more queued: team-a borrows the idle GPUs.
        ns_b = tenant_namespaces["team-b"]
        cluster.core.delete_collection_namespaced_pod(ns_b, grace_period_seconds=0)
        eventually(lambda: cluster.core.list_namespaced_pod(ns_b).items, lambda ps: not ps,
                   timeout=60, what="team-b's pods to be gone")
        try:
            eventually(lambda: _released(cluster, tenant_namespaces),
                       lambda r: r["team-a"] == CAPACITY, timeout=SETTLE_TIMEOUT,
                       what="team-a to borrow team-b's idle quota up to all 12 GPUs")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- berth serve log:\n{_log_tail(hook)}") from None


def test_a_tenant_alone_borrows_idle_quota_while_the_other_holds_little(
    cluster: E2ECluster, gpu_nodes: Callable[[], list[str]],
    tenant_namespaces: dict[str, str], tmp_path: Path
) -> None:
    # team-b wants 2 of its 6: team-a (quota 6) borrows the other 4 and fills the nodes.
    edit = _tenants({"team-a": 6, "team-b": 6}, {"team-a": True, "team-b": True})
    with _serve(cluster, tmp_path, tenant_namespaces, edit) as hook:
        _burst(cluster, tenant_namespaces, {"team-a": BURST, "team-b": 2})
        gpu_nodes()
        split = _settled(cluster, tenant_namespaces, hook, CAPACITY,
                         f"the {CAPACITY} GPUs to fill")
        assert split == {"team-a": 10, "team-b": 2}, split


def test_a_hard_quota_without_borrowing_is_never_exceeded(
    cluster: E2ECluster, gpu_nodes: Callable[[], list[str]],
    tenant_namespaces: dict[str, str], tmp_path: Path
) -> None:
    # team-b: a hard quota of 3 GPUs (below its weighted share of 4), no borrowing; team-a:
    # no quota. Both backlogged: team-b holds 3 at every observed moment, team-a the rest.
    edit = _tenants({"team-a": None, "team-b": 3}, {"team-a": True, "team-b": False})
    with _serve(cluster, tmp_path, tenant_namespaces, edit) as hook:
        with Sampler(cluster, tenant_namespaces) as sampler:
            _burst(cluster, tenant_namespaces, {"team-a": BURST, "team-b": BURST})
            gpu_nodes()
            split = _settled(cluster, tenant_namespaces, hook, CAPACITY,
                             f"the {CAPACITY} GPUs to fill")
        assert split == {"team-a": 9, "team-b": 3}, split
        over = [s for s in sampler.samples if s["team-b"] > 3]
        assert len(sampler.samples) > 10 and not over, \
            f"team-b above its hard quota of 3 at {len(over)} moments, e.g. {over[:3]}"
