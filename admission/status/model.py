"""The controller's own picture of the cluster, rebuilt from one read: the same inventory
filter, gang grouping, snapshot and quota usage the batch cycle computes
(:mod:`admission.controller.snapshot`, :func:`solver.rules.quota_usage_milli`), so what the
status says a tenant uses is what the controller judges its quota on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.inventory import Inventory
from admission.controller.settings import Settings, from_policy
from admission.controller.snapshot import Built, GangState, build
from admission.controller.translate import Obj, TranslationError
from admission.status.gather import ClusterView, StatusError
from solver.rules import quota_usage_milli
from solver.types import MILLI, ProblemError


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod that holds GPUs (or is about to: released, not bound yet)."""

    pod: str  # namespace/name
    tenant: str | None  # None: not a Berth pod
    node: str
    milli: int
    since: datetime | None  # release time, else creation


@dataclass(slots=True)
class Picture:
    view: ClusterView
    settings: Settings
    built: Built
    pods: dict[str, Obj]  # the pods that matter, by namespace/name (the controller's filter)
    holders: list[Holder]
    used: dict[str, int]  # milli-GPU per tenant, the quota rule's usage
    now: datetime

    @property
    def nodes_known(self) -> bool:
        return self.view.nodes is not None


def picture(view: ClusterView, now: datetime) -> Picture:
    settings = from_policy(view.policy)
    inventory = Inventory()
    inventory.replace_pods(view.pods)
    inventory.replace_nodes(view.nodes or [])
    snap_view = inventory.view()
    try:
        built = build(snap_view, settings, now)
    except (ProblemError, TranslationError, ValueError) as exc:
        raise StatusError(f"the cluster's pods and nodes do not form a snapshot: {exc}") from None
    if view.nodes is not None:
        holders = [Holder(r.name, r.tenant, r.node, sum(s.milli for s in r.gpus),
                          _since(snap_view.pods.get(r.name)))
                   for r in built.snapshot.running]
        used = quota_usage_milli(built.snapshot)
    else:
        finishing = {tr.pod_key(p) for g in built.by_state(GangState.FINISHING) for p in g.gated}
        holders = _holders_from_pods(snap_view.pods.values(), finishing)
        by_tenant: defaultdict[str, int] = defaultdict(int)
        for h in holders:
            if h.tenant is not None:
                by_tenant[h.tenant] += h.milli
        used = dict(by_tenant)
    return Picture(view=view, settings=settings, built=built, pods=dict(snap_view.pods),
                   holders=holders, used=used, now=now)


def _since(pod: Obj | None) -> datetime | None:
    if pod is None:
        return None
    return tr.parse_time(tr.annotations_of(pod).get(c.ANNOTATION_ASSIGNED_AT)) or \
        tr.created_at(pod)


def _holders_from_pods(pods: Iterable[Obj], finishing: set[str]) -> list[Holder]:
    """Without nodes: what each pod holds by its own account, as
    :func:`admission.controller.translate.running_from_pod` reads it (Berth's recorded shares,
    else whole GPUs of its ``nvidia.com/gpu`` request)."""
    out: list[Holder] = []
    for pod in pods:
        key = tr.pod_key(pod)
        if tr.has_berth_gate(pod) and key not in finishing:
            continue
        assigned = tr.assigned_shares(pod)
        node = tr.spec(pod).get("nodeName") or (assigned[0] if assigned else None)
        if not node:
            continue
        try:
            if assigned is not None and assigned[0] == node:
                milli = sum(s.milli for s in assigned[1])
            else:
                milli = tr.pod_gpu_resource(pod) * MILLI
        except TranslationError:
            continue
        out.append(Holder(key, tr.labels(pod).get(c.LABEL_TENANT), node, milli,
                          _since(pod)))
    return out
