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
from admission.controller import trust
from admission.controller.dra import DraState
from admission.controller.inventory import Inventory
from admission.controller.runtimes import Learner
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
    for kind, objects in view.dra.items():
        inventory.replace_dra(kind, objects)
    snap_view = inventory.view()
    # run times learned from the finished pods the API server holds, as a leader learns them
    # when it starts (policy solver.learnedRuntimes; runtimes.Learner)
    learner = Learner(settings.solver_policy.learned_runtimes)
    if settings.solver_policy.learned_runtimes.enabled:
        for pod in view.pods:
            if tr.is_finished(pod):
                learner.observe(pod, trust.tenant_of(pod, settings))
    try:
        built = build(snap_view, settings, now, learner=learner)
    except (ProblemError, TranslationError, ValueError) as exc:
        raise StatusError(f"the cluster's pods and nodes do not form a snapshot: {exc}") from None
    if view.nodes is not None:
        holders = [Holder(r.name, r.tenant, r.node, sum(s.milli for s in r.gpus),
                          _since(snap_view.pods.get(r.name)))
                   for r in built.snapshot.running]
        used = quota_usage_milli(built.snapshot)
    else:
        finishing = {tr.pod_key(p) for g in built.by_state(GangState.FINISHING) for p in g.gated}
        holders = _holders_from_pods(snap_view.pods.values(), finishing, settings, built.dra)
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


def _holders_from_pods(pods: Iterable[Obj], finishing: set[str], settings: Settings,
                       dra: DraState | None = None) -> list[Holder]:
    """Without nodes: what each pod holds as the controller counts it
    (:func:`admission.controller.snapshot.holding`): a bound pod its ``nvidia.com/gpu``
    request (Berth's recorded shares where the controller believes them), a pod not bound only
    Berth's believed plan; the tenant is its namespace's."""
    out: list[Holder] = []
    for pod in pods:
        key = tr.pod_key(pod)
        if tr.has_berth_gate(pod) and key not in finishing:
            continue
        planned = trust.planned_shares(pod, settings, dra)
        node = tr.spec(pod).get("nodeName") or (planned[0] if planned else None)
        if not node:
            continue
        try:
            if planned is not None and planned[0] == node:
                milli = sum(s.milli for s in planned[1])
            else:
                milli = tr.pod_gpu_resource(pod) * MILLI
        except TranslationError:
            continue
        out.append(Holder(key, trust.tenant_of(pod, settings), node, milli, _since(pod)))
    return out
