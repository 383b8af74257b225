"""From the inventory to one immutable :class:`solver.types.Snapshot`, and the gang bookkeeping
the cycle needs around it.

Pods are sorted into gangs and each gang into one state:

- ``pending``: every pod exists and waits behind Berth's gate: the solver decides it.
- ``incomplete``: some pods have not arrived; it waits (and times out after the policy's
  gang timeout), never reaching the solver.
- ``finishing``: every pod carries the same plan id, so a release was under way (this
  controller's or a crashed one's): it is finished without solving again.
- ``broken``: a pod carries a value Berth cannot read; its pods are told why.

What holds capacity (:class:`solver.types.Running`): pods bound to a node, pods Berth released
that are not bound yet (their recorded node and GPUs), and the pods of finishing gangs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.inventory import View
from admission.controller.settings import Settings
from admission.controller.translate import Obj, TranslationError
from solver.types import Gang, Node, PodRequest, ProblemError, Running, Snapshot


class GangState(StrEnum):
    """Where a gang stands this cycle (the module docstring says what each means)."""

    PENDING = "pending"
    INCOMPLETE = "incomplete"
    FINISHING = "finishing"
    BROKEN = "broken"


@dataclass(slots=True)
class GangInfo:
    key: str  # namespace/gang
    tenant: str
    size: int
    gated: list[Obj] = field(default_factory=list)  # pods still behind Berth's gate
    released: list[Obj] = field(default_factory=list)  # pods of the gang Berth already released
    first_created: datetime | None = None
    state: GangState = GangState.PENDING
    plan: str | None = None  # the plan id all pods carry (finishing)
    error: str | None = None
    gang: Gang | None = None  # the solver's view (pending)

    @property
    def pods(self) -> list[Obj]:
        return self.gated + self.released

    @property
    def missing(self) -> int:
        return max(0, self.size - len(self.pods))

    def qos_classes(self) -> set[str]:
        return {q for p in self.gated if (q := tr.qos_class(p))}


class Memo:
    """Translations of pods and nodes kept across cycles, keyed by uid and resourceVersion: an
    object the API server has not changed is not translated again. Entries not used in a
    cycle are dropped at its end, so the memo never outgrows the inventory."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str, str], PodRequest] = {}
        self._nodes: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], Node] = {}
        self._used_pods: set[tuple[str, str, str]] = set()
        self._used_nodes: set[tuple[str, str, str, tuple[tuple[str, str], ...]]] = set()

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str, str] | None:
        m = tr.meta(obj)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        return (tr.pod_key(obj), str(uid), str(rv)) if uid and rv else None

    def pod_request(self, pod: Obj) -> PodRequest:
        key = self._key(pod)
        if key is None:
            return tr.pod_request(pod)
        self._used_pods.add(key)
        hit = self._pods.get(key)
        if hit is None:
            hit = self._pods[key] = tr.pod_request(pod)
        return hit

    def node(self, obj: Obj, topology_labels: Mapping[str, str]) -> Node:
        base = self._key(obj)
        if base is None:
            return tr.node_from_api(obj, topology_labels)
        key = (*base, tuple(sorted(topology_labels.items())))
        self._used_nodes.add(key)
        hit = self._nodes.get(key)
        if hit is None:
            hit = self._nodes[key] = tr.node_from_api(obj, topology_labels)
        return hit

    def sweep(self) -> None:
        self._pods = {k: v for k, v in self._pods.items() if k in self._used_pods}
        self._nodes = {k: v for k, v in self._nodes.items() if k in self._used_nodes}
        self._used_pods.clear()
        self._used_nodes.clear()


@dataclass(slots=True)
class Built:
    snapshot: Snapshot
    gangs: dict[str, GangInfo]
    nodes: dict[str, Node]
    node_errors: dict[str, str]

    def by_state(self, state: GangState) -> list[GangInfo]:
        return [g for g in self.gangs.values() if g.state == state]


def build_nodes(view: View, settings: Settings,
                memo: Memo) -> tuple[dict[str, Node], dict[str, str]]:
    nodes: dict[str, Node] = {}
    errors: dict[str, str] = {}
    for name, obj in sorted(view.nodes.items()):
        try:
            nodes[name] = memo.node(obj, settings.topology_labels)
        except (TranslationError, ValueError) as exc:
            errors[name] = str(exc)
    return nodes, errors


def group_gangs(view: View) -> dict[str, GangInfo]:
    gangs: dict[str, GangInfo] = {}
    for pod in view.pods.values():
        gated = tr.has_berth_gate(pod)
        if not gated and not tr.annotations_of(pod).get(c.ANNOTATION_ASSIGNED_NODE):
            continue  # not Berth's
        key = tr.gang_name(pod)
        info = gangs.get(key)
        if info is None:
            info = gangs[key] = GangInfo(key=key, tenant=tr.tenant(pod), size=1)
        try:
            info.size = max(info.size, tr.gang_size(pod))
        except TranslationError as exc:
            info.state, info.error = GangState.BROKEN, str(exc)
        (info.gated if gated else info.released).append(pod)
        created = tr.created_at(pod)
        if created and (info.first_created is None or created < info.first_created):
            info.first_created = created
    # Released-only gangs are history; only gangs with a gated pod are decided here.
    return {k: g for k, g in gangs.items() if g.gated}


def classify(info: GangInfo) -> None:
    if info.state == GangState.BROKEN:
        return
    plans = {tr.plan_id(p) for p in info.gated}
    if len(plans) == 1 and None not in plans and all(tr.assigned_shares(p) for p in info.gated):
        (plan,) = plans
        same = [p for p in info.pods if tr.plan_id(p) == plan]
        if len(same) >= info.size:
            info.state, info.plan = GangState.FINISHING, plan
            return
    info.state = GangState.INCOMPLETE if info.missing else GangState.PENDING


def to_gang(info: GangInfo, now: datetime, settings: Settings, memo: Memo) -> Gang:
    pods = sorted(info.gated, key=tr.pod_key)
    requests: list[PodRequest] = [memo.pod_request(p) for p in pods]
    topo = None
    for p in pods:
        topo = topo or tr.topology_requirement(p)
    wait = (now - info.first_created).total_seconds() if info.first_created else 0.0
    tenant = settings.tenant(info.tenant)
    if settings.tenants and tenant is None:
        raise TranslationError(f"tenant {info.tenant!r} is not in the policy")
    return Gang(name=info.key, tenant=info.tenant, pods=tuple(requests),
                priority=max(tr.priority(p) for p in pods), wait_seconds=max(0.0, wait),
                topology=topo)


def holding(view: View, nodes: Mapping[str, Node], finishing: list[GangInfo]) -> list[Running]:
    """Everything that holds capacity now or is about to."""
    out: list[Running] = []
    taken: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    finishing_keys = {tr.pod_key(p) for g in finishing for p in g.gated}
    berth_first = sorted(view.pods.values(),
                         key=lambda p: (tr.assigned_shares(p) is None, tr.pod_key(p)))
    for pod in berth_first:
        key = tr.pod_key(pod)
        gated = tr.has_berth_gate(pod)
        if gated and key not in finishing_keys:
            continue
        node_name = tr.spec(pod).get("nodeName")
        if not node_name:
            assigned = tr.assigned_shares(pod)
            if assigned is None:
                continue
            node_name = assigned[0]
        node = nodes.get(node_name)
        if node is None:
            continue
        try:
            r = tr.running_from_pod(pod, node, taken[node.name])
        except (TranslationError, ValueError):
            continue
        for s in r.gpus:
            taken[node.name][s.index] += s.milli
        out.append(r)
    return out


def build(view: View, settings: Settings, now: datetime, memo: Memo | None = None,
          only: Callable[[GangInfo], bool] | None = None) -> Built:
    """Nodes, gangs by state and the snapshot of the pending gangs; ``only`` keeps just the
    gangs it accepts (the fast path's classes) but every pod that holds capacity."""
    memo = memo or Memo()
    nodes, node_errors = build_nodes(view, settings, memo)
    gangs = group_gangs(view)
    for info in gangs.values():
        classify(info)
    if only is not None:
        finishing_all = [g for g in gangs.values() if g.state == GangState.FINISHING]
        gangs = {k: g for k, g in gangs.items() if only(g)}
        running = holding(view, nodes, finishing_all)
        return _finish_build(gangs, nodes, node_errors, running, now, settings, memo,
                             sweep=False)
    finishing = [g for g in gangs.values() if g.state == GangState.FINISHING]
    running = holding(view, nodes, finishing)
    return _finish_build(gangs, nodes, node_errors, running, now, settings, memo, sweep=True)


def _finish_build(gangs: dict[str, GangInfo], nodes: dict[str, Node],
                  node_errors: dict[str, str], running: list[Running], now: datetime,
                  settings: Settings, memo: Memo, *, sweep: bool) -> Built:
    solvable: list[Gang] = []
    for info in sorted(gangs.values(), key=lambda g: g.key):
        if info.state != GangState.PENDING:
            continue
        try:
            info.gang = to_gang(info, now, settings, memo)
            solvable.append(info.gang)
        except (TranslationError, ProblemError) as exc:
            info.state, info.error = GangState.BROKEN, str(exc)
    if sweep:  # a partial build (fast path) must not evict what the batch cycle memoised
        memo.sweep()
    snapshot = Snapshot(nodes=tuple(nodes.values()), gangs=tuple(solvable),
                        running=tuple(running), tenants=settings.tenants,
                        policy=settings.solver_policy)
    return Built(snapshot=snapshot, gangs=gangs, nodes=nodes, node_errors=node_errors)
