"""From the inventory to one immutable :class:`solver.types.Snapshot`, and the gang bookkeeping
the cycle needs around it.

Pods are sorted into gangs and each gang into one state:

- ``pending``: every pod exists and waits behind Berth's gate: the solver decides it.
- ``queued``: every pod exists but the release backend's own queue has not admitted it yet
  (Kueue's gate is still on a pod: :meth:`admission.backends.base.Backend.waiting_for`); it
  never reaches the solver and holds nothing until it is admitted.
- ``incomplete``: some pods have not arrived; it waits (and times out after the policy's
  gang timeout), never reaching the solver.
- ``finishing``: every pod carries the same plan id, so a release was under way (this
  controller's or a crashed one's): it is finished without solving again.
- ``broken``: a pod carries a value Berth cannot read or does not believe (demand annotations
  its resources do not bear out; a gang whose pods disagree on its size, that has more pods
  than it declares, or that is larger than the tenant's ``maxGangSize``); its pods are told
  why and it is never released.

Only pods in namespaces the policy manages are Berth's, with their namespace's tenant
(:mod:`.trust`). What holds capacity (:class:`solver.types.Running`): pods bound to a node
(their GPUs by their resources, on the indexes Berth recorded when it may be believed), and
pods Berth released that are not bound yet and the pods of finishing gangs, on the node and
GPUs of Berth's plan when it may be believed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from admission import constants as c
from admission.backends import backend_named
from admission.controller import demand, runtimes, trust
from admission.controller import translate as tr
from admission.controller.dra import WAITING, DraState
from admission.controller.inventory import View
from admission.controller.settings import Settings
from admission.controller.translate import Obj, TranslationError
from solver.types import (
    MAX_WAIT_SECONDS,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    ProblemError,
    Running,
    Snapshot,
    TopologyMode,
    TopologyRequirement,
)


class Refusal(StrEnum):
    """Why a gang is broken when Berth could read it but does not believe it (the Waiting
    reason each becomes is :func:`admission.controller.explain.reasons`' word)."""

    DEMAND = "demand"  # demand annotations the resources do not bear out
    GANG_SIZE = "gang-size"  # pods that disagree on the size, or more pods than declared
    GANG_TOO_LARGE = "gang-too-large"  # over the tenant's maxGangSize


class GangState(StrEnum):
    """Where a gang stands this cycle (the module docstring says what each means)."""

    PENDING = "pending"
    QUEUED = "queued"  # complete, but its backend's own queue has not admitted it yet
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
    error: str | None = None  # broken, incomplete: what is wrong; queued: what it waits for
    refusal: Refusal | None = None  # broken, though readable: why Berth will not release it
    declared: list[int | None] = field(default_factory=list)  # gang size each pod declares
    gang: Gang | None = None  # the solver's view (pending)
    # admitted: when each pod (by namespace/name) is expected to end once released, shown on
    # it by the release (runtimes.release_annotations; Built.expect fills it)
    expected: dict[str, runtimes.Expected] = field(default_factory=dict)

    @property
    def pods(self) -> list[Obj]:
        return self.gated + self.released

    @property
    def missing(self) -> int:
        return max(0, self.size - len(self.pods))

    def refuse(self, refusal: Refusal, error: str) -> None:
        """Never release this gang as it is; its pods say ``error``."""
        self.state, self.refusal, self.error = GangState.BROKEN, refusal, error


class Memo:
    """Translations of pods and nodes kept across cycles, keyed by uid and resourceVersion: an
    object the API server has not changed is not translated again. Entries not used in a
    cycle are dropped at its end, so the memo never outgrows the inventory."""

    def __init__(self) -> None:
        self._pods: dict[tuple[tuple[str, str, str], str | None], PodRequest] = {}
        self._nodes: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], Node] = {}
        self._used_pods: set[tuple[tuple[str, str, str], str | None]] = set()
        self._used_nodes: set[tuple[str, str, str, tuple[tuple[str, str], ...]]] = set()

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str, str] | None:
        m = tr.meta(obj)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        return (tr.pod_key(obj), str(uid), str(rv)) if uid and rv else None

    def pod_request(self, pod: Obj, qos: str | None) -> PodRequest:
        base = self._key(pod)
        if base is None:
            return tr.pod_request(pod, qos)
        key = (base, qos)  # the class is the policy's word, which may change under the pod
        self._used_pods.add(key)
        hit = self._pods.get(key)
        if hit is None:
            hit = self._pods[key] = tr.pod_request(pod, qos)
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
    dra: DraState = field(default_factory=DraState)
    # where each running pod's known expected end comes from, by its name (explain.py)
    end_sources: dict[str, runtimes.Source] = field(default_factory=dict)
    jobs: Mapping[str, Obj] = field(default_factory=dict)  # the view's Jobs (runtimes.py)
    learner: runtimes.Learner | None = None  # run times learned from finished pods

    def expect(self, info: GangInfo, settings: Settings, now: datetime) -> GangInfo:
        """``info`` with when each of its pods is expected to end once released, for the
        release to show (only the gangs a plan admits: not every pending pod each window)."""
        info.expected = {tr.pod_key(p): runtimes.expected_end(
            p, runtimes.owner_job(p, self.jobs), settings.backend, now,
            estimate_cap=settings.max_expected_runtime_seconds,
            learned=_learned(self.learner, p, settings)) for p in info.gated}
        return info

    def by_state(self, state: GangState) -> list[GangInfo]:
        return [g for g in self.gangs.values() if g.state == state]


def build_nodes(view: View, settings: Settings, memo: Memo,
                dra: DraState | None = None) -> tuple[dict[str, Node], dict[str, str]]:
    """The nodes as the solver sees them; ``dra``: their GPUs published in ResourceSlices,
    added after their device-plugin GPUs."""
    nodes: dict[str, Node] = {}
    errors: dict[str, str] = {}
    for name, obj in sorted(view.nodes.items()):
        try:
            node = memo.node(obj, settings.topology_labels)
            nodes[name] = dra.extend(node) if dra is not None and dra.devices else node
        except (TranslationError, ValueError) as exc:
            errors[name] = str(exc)
    return nodes, errors


def group_gangs(view: View, settings: Settings) -> dict[str, GangInfo]:
    """Berth's pods (gated, or carrying Berth's placement) of managed namespaces, by gang;
    only gangs with a pod still gated are returned, their size judged (:func:`judge_size`)."""
    gangs: dict[str, GangInfo] = {}
    for pod in view.pods.values():
        gated = tr.has_berth_gate(pod)
        if not gated and not tr.annotations_of(pod).get(c.ANNOTATION_ASSIGNED_NODE):
            continue  # not Berth's
        tenant = trust.tenant_of(pod, settings)
        if tenant is None:
            continue  # not a namespace the policy manages: never Berth's, whatever it says
        key = tr.gang_name(pod)
        info = gangs.get(key)
        if info is None:
            info = gangs[key] = GangInfo(key=key, tenant=tenant, size=1)
        try:
            info.declared.append(tr.gang_size(pod))
        except TranslationError as exc:
            info.state, info.error = GangState.BROKEN, str(exc)
        (info.gated if gated else info.released).append(pod)
        created = tr.created_at(pod)
        if created and (info.first_created is None or created < info.first_created):
            info.first_created = created
    # Released-only gangs are history; only gangs with a gated pod are decided here.
    live = {k: g for k, g in gangs.items() if g.gated}
    for info in live.values():
        judge_size(info, settings)
    return live


def judge_size(info: GangInfo, settings: Settings) -> None:
    """The gang's size from what its pods declare. Refused: pods that disagree (or some that
    declare none), more pods than declared, and a size over the tenant's ``maxGangSize``. A
    gang none of whose pods declares a size is as large as the pods that exist."""
    if info.state == GangState.BROKEN:
        return
    have = len(info.pods)
    stated = set(info.declared)
    if len(stated) > 1:
        said = ", ".join(sorted("none" if d is None else str(d) for d in stated))
        info.refuse(Refusal.GANG_SIZE, f"the pods of gang {info.key} disagree on its size "
                    f"({c.ANNOTATION_GANG_SIZE}: {said}); every pod must declare the same")
        return
    declared = next(iter(stated))
    info.size = have if declared is None else declared
    if have > info.size:
        info.refuse(Refusal.GANG_SIZE, f"gang {info.key} has {have} pods but its pods declare "
                    f"{c.ANNOTATION_GANG_SIZE}: {info.size}; it is never released as it is")
        return
    limit = settings.bounds_of(info.tenant).max_gang_size
    if limit is not None and info.size > limit:
        info.refuse(Refusal.GANG_TOO_LARGE, f"gang {info.key} of {info.size} pods exceeds tenant "
                    f"{info.tenant}'s maxGangSize of {limit}; split the job")


def classify(info: GangInfo, settings: Settings, dra: DraState | None = None) -> None:
    if info.state == GangState.BROKEN:
        return
    for p in info.pods:
        try:
            why = demand.problem(p, settings.sharing, dra)
        except TranslationError as exc:
            info.state, info.error = GangState.BROKEN, str(exc)
            return
        if why is not None and why.startswith(WAITING):  # its claim is not created yet
            info.state, info.error = GangState.INCOMPLETE, f"pod {tr.pod_key(p)}: " + \
                why[len(WAITING):]
            return
        if why is not None:
            info.refuse(Refusal.DEMAND, f"pod {tr.pod_key(p)}: {why}; it is not released")
            return
    plans = {tr.plan_id(p) for p in info.gated}
    if len(plans) == 1 and None not in plans and all(
            trust.planned_shares(p, settings, dra) for p in info.gated):
        (plan,) = plans
        same = [p for p in info.pods if tr.plan_id(p) == plan]
        if len(same) >= info.size:
            info.state, info.plan = GangState.FINISHING, plan
            return
    if info.missing:
        info.state = GangState.INCOMPLETE
        return
    backend = backend_named(settings.backend)
    for p in sorted(info.gated, key=tr.pod_key):
        waiting = backend.waiting_for(p)
        if waiting is not None:
            info.state, info.error = GangState.QUEUED, f"pod {tr.pod_key(p)}: {waiting}"
            return
    info.state = GangState.PENDING


def to_gang(info: GangInfo, now: datetime, settings: Settings, memo: Memo,
            dra: DraState | None = None, nodes: Mapping[str, Node] | None = None) -> Gang:
    pods = sorted(info.gated, key=tr.pod_key)
    requests: list[PodRequest] = [
        memo.pod_request(p, trust.qos_of(p, settings, info.tenant)) for p in pods]
    together = False
    if dra is not None and dra.users:  # pods naming one ResourceClaim share its GPUs
        shared = [dra.shared(p) for p in pods]
        requests = [dra.share_claims(r, off, node)
                    for r, (off, node, _) in zip(requests, shared, strict=True)]
        together = any(s[2] for s in shared)
    if dra is not None and dra.where and nodes is not None:
        requests = [dra.solver_models(r, p, nodes) for r, p in zip(requests, pods, strict=True)]
    topo = None
    for p in pods:
        topo = topo or tr.topology_requirement(p)
    if together:  # a claim's devices sit on one node: the pods sharing it meet there
        topo = TopologyRequirement("node", TopologyMode.REQUIRED)
    wait = (now - info.first_created).total_seconds() if info.first_created else 0.0
    tenant = settings.tenant(info.tenant)
    if settings.tenants and tenant is None:
        raise TranslationError(f"tenant {info.tenant!r} is not in the policy")
    # Backfill eligibility: only bounds the tenant cannot stretch, on every pod (runtimes.py)
    bounds = [runtimes.backfill_bound(p, settings.backend).remaining_s for p in pods]
    runtime = None if None in bounds else max(b for b in bounds if b is not None)
    return Gang(name=info.key, tenant=info.tenant, pods=tuple(requests),
                priority=max(trust.priority_of(p, settings, info.tenant) for p in pods),
                wait_seconds=min(MAX_WAIT_SECONDS, max(0.0, wait)), topology=topo,
                runtime_s=runtime)


def _learned(learner: runtimes.Learner | None, pod: Obj, settings: Settings) -> float | None:
    return None if learner is None else learner.estimate(pod, trust.tenant_of(pod, settings))


def holding(view: View, nodes: Mapping[str, Node], finishing: list[GangInfo],
            settings: Settings, dra: DraState | None = None,
            now: datetime | None = None,
            sources: dict[str, runtimes.Source] | None = None,
            learner: runtimes.Learner | None = None) -> list[Running]:
    """Everything that holds capacity now or is about to (the module docstring says what and
    how it is counted; :mod:`.dra` for GPUs held through ResourceClaims). Given ``now``, each
    pod says when it is expected to end (:func:`.runtimes.expected_end`: its earliest bound,
    its own deadline, its Job's or Kueue's, else its declared estimate, else what ``learner``
    learned of its kind), and ``sources`` is told where each known end comes from."""
    out: list[Running] = []
    dra = dra or DraState()
    counted: set[str] = set()  # claims whose devices a pod already holds
    taken: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    finishing_keys = {tr.pod_key(p) for g in finishing for p in g.gated}
    pods: list[tuple[bool, str, Obj, tuple[str, tuple[GpuShare, ...]] | None]] = []
    for pod in view.pods.values():
        if tr.is_finished(pod):
            continue
        key = tr.pod_key(pod)
        if tr.has_berth_gate(pod) and key not in finishing_keys:
            continue
        planned = trust.planned_shares(pod, settings, dra)
        pods.append((planned is None, key, pod, planned))
    for _anonymous, _key, pod, planned in sorted(pods, key=lambda x: (x[0], x[1])):
        node_name = tr.spec(pod).get("nodeName")
        shares = None
        held = (_claims_held(pod, dra, counted) if tr.spec(pod).get("resourceClaims")
                or (pod.get("status") or {}).get("extendedResourceClaimStatus") else None)
        if held is not None:  # its GPUs are its allocated claims' devices
            node_name = node_name or held[0]
            shares = held[1] if held[0] == node_name else ()
        elif node_name:  # bound: it holds what its resources say, where Berth put it if it did
            if planned is not None and planned[0] == node_name:
                shares = planned[1]
        elif planned is not None:  # released or finishing, not bound yet: Berth's plan
            node_name, shares = planned
        else:
            continue  # neither bound nor planned by Berth: it holds nothing
        node = nodes.get(node_name)
        if node is None:
            continue
        tenant = trust.tenant_of(pod, settings)
        try:
            r = tr.running_from_pod(pod, node, taken[node.name], planned=shares, tenant=tenant,
                                    qos=trust.qos_of(pod, settings, tenant))
        except (TranslationError, ValueError):
            continue
        for s in r.gpus:
            taken[node.name][s.index] += s.milli
        if now is not None:
            job = runtimes.owner_job(pod, view.jobs)
            expected = runtimes.expected_end(
                pod, job, settings.backend, now,
                estimate_cap=settings.max_expected_runtime_seconds,
                learned=None if learner is None else learner.estimate(pod, tenant))
            if expected.remaining_s is not None:
                r = replace(r, remaining_s=expected.remaining_s)
                if sources is not None:
                    sources[r.name] = expected.source
        if now is not None and leaving(pod):
            r = replace(r, remaining_s=0.0)  # going: reclaim counts what it holds as freed
        if (now is not None and tenant is not None and planned is not None
                and planned[0] == node_name and tr.spec(pod).get("nodeName")):
            r = replace(r, **reclaim_view(pod, settings, tenant, now))
        out.append(r)
    for key in sorted(set(dra.claims) - counted):  # claims no pod in the view holds
        found = dra.claim_shares(key)
        if found is None:
            continue
        tenant = settings.tenant_of_namespace(key.partition("/")[0])
        out.append(Running(name=f"resourceclaim/{key}", node=found[0], gpus=found[1],
                           tenant=tenant))
        for s in found[1]:
            taken[found[0]][s.index] += s.milli
    return out


def leaving(pod: Obj) -> bool:
    """The pod is on its way out: being deleted, or a disruption (an eviction, a preemption)
    has been announced on it (condition ``DisruptionTarget`` True). (The inventory drops a pod
    being deleted altogether, :meth:`.Inventory.pod_matters`; what is left here is a pod whose
    eviction was announced and not yet carried out.)"""
    if tr.meta(pod).get("deletionTimestamp"):
        return True
    return any(cond.get("type") == c.CONDITION_DISRUPTION_TARGET and cond.get("status") == "True"
               for cond in (pod.get("status") or {}).get("conditions") or [])


def reclaim_view(pod: Obj, settings: Settings, tenant: str, now: datetime) -> dict[str, Any]:
    """What reclaim chooses victims by (:attr:`solver.types.Running.gang`, ``priority``,
    ``run_s``), for a pod Berth placed (its plan believed) and that is bound where Berth put
    it. Each is read from what the tenant cannot change once the pod exists: the gang and the
    priority from Berth's keys (protected after CREATE: config/base/pod-keys-policy.yaml; the
    priority held to the tenant's bound) or the immutable ``spec.priority``; the run time from
    Berth's own ``berth.dev/assigned-at`` (when it released the pod), never from the pod's
    status."""
    released = tr.parse_time(tr.annotations_of(pod).get(c.ANNOTATION_ASSIGNED_AT))
    run = None if released is None else min(MAX_WAIT_SECONDS,
                                            max(0.0, (now - released).total_seconds()))
    return {"gang": tr.gang_name(pod), "priority": trust.priority_of(pod, settings, tenant),
            "run_s": run}


def _claims_held(pod: Obj, dra: DraState,
                 counted: set[str]) -> tuple[str, tuple[GpuShare, ...]] | None:
    """The node and GPU shares of the pod's allocated claims (a claim another pod already
    holds adds nothing: a shared claim counts once); None when none of its claims is
    allocated with GPUs."""
    keys = dra.pod_claim_keys(pod)
    node: str | None = None
    shares: list[GpuShare] = []
    for key in keys:
        found = dra.claim_shares(key)
        if found is None:
            continue
        node = node or found[0]
        if key not in counted and found[0] == node:
            shares += found[1]
        counted.add(key)
    return (node, tuple(shares)) if node else None


def build(view: View, settings: Settings, now: datetime, memo: Memo | None = None,
          only: Callable[[GangInfo], bool] | None = None,
          learner: runtimes.Learner | None = None) -> Built:
    """Nodes, gangs by state and the snapshot of the pending gangs; ``only`` keeps just the
    gangs it accepts (the fast path's classes) but every pod that holds capacity;
    ``learner``: run times learned from finished pods, for the pods that have no other."""
    memo = memo or Memo()
    dra = DraState.from_view(view)
    nodes, node_errors = build_nodes(view, settings, memo, dra)
    gangs = group_gangs(view, settings)
    sources: dict[str, runtimes.Source] = {}
    for info in gangs.values():
        classify(info, settings, dra)
    if only is not None:
        finishing_all = [g for g in gangs.values() if g.state == GangState.FINISHING]
        gangs = {k: g for k, g in gangs.items() if only(g)}
        running = holding(view, nodes, finishing_all, settings, dra, now, sources, learner)
        return _finish_build(gangs, nodes, node_errors, running, now, settings, memo, dra,
                             view.jobs, sources, sweep=False, learner=learner)
    finishing = [g for g in gangs.values() if g.state == GangState.FINISHING]
    running = holding(view, nodes, finishing, settings, dra, now, sources, learner)
    return _finish_build(gangs, nodes, node_errors, running, now, settings, memo, dra,
                         view.jobs, sources, sweep=True, learner=learner)


def _finish_build(gangs: dict[str, GangInfo], nodes: dict[str, Node],
                  node_errors: dict[str, str], running: list[Running], now: datetime,
                  settings: Settings, memo: Memo, dra: DraState, jobs: Mapping[str, Obj],
                  sources: dict[str, runtimes.Source], *, sweep: bool,
                  learner: runtimes.Learner | None = None) -> Built:
    solvable: list[Gang] = []
    for info in sorted(gangs.values(), key=lambda g: g.key):
        if info.state != GangState.PENDING:
            continue
        try:
            info.gang = to_gang(info, now, settings, memo, dra, nodes)
            solvable.append(info.gang)
        except (TranslationError, ProblemError) as exc:
            info.state, info.error = GangState.BROKEN, str(exc)
    if sweep:  # a partial build (fast path) must not evict what the batch cycle memoised
        memo.sweep()
    snapshot = Snapshot(nodes=tuple(nodes.values()), gangs=tuple(solvable),
                        running=tuple(running), tenants=settings.tenants,
                        policy=settings.solver_policy)
    return Built(snapshot=snapshot, gangs=gangs, nodes=nodes, node_errors=node_errors, dra=dra,
                 end_sources=sources, jobs=jobs, learner=learner)
