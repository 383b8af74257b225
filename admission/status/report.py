"""``berth status``: per tenant its quota, what it uses, borrows and lends; the waiting gangs
in the solver's own queue order with the reason the controller wrote on them; reservations and
recent reclaims when there are any. Pure: from a :class:`~admission.status.model.Picture`.

Figures are GPUs (milli-GPU / 1000). *used* is the quota rule's usage
(:func:`solver.rules.quota_usage_milli`): GPUs held by the tenant's bound pods and by pods
Berth released that are not bound yet. *borrowed* is usage beyond quota. *lent* is the part of
the tenant's idle quota that borrowers use: the quota rule pools idle quota and does not say
whose a borrower takes, so the borrowed total is shared among the tenants with idle quota in
proportion to how much each leaves idle.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from admission.controller import translate as tr
from admission.controller import trust
from admission.controller.explain import gangs_ahead
from admission.controller.snapshot import GangInfo, GangState
from admission.controller.translate import Obj, TranslationError
from admission.controller.unbound import NOT_BOUND
from admission.status import keys
from admission.status.model import Picture
from solver.queue import queue_order
from solver.types import MILLI, Snapshot

# How each gang state reads in the table.
STATE_WORDS = {
    GangState.PENDING: "queued",
    GangState.QUEUED: "at its queue",  # Kueue has not admitted it yet (admission/backends)
    GangState.INCOMPLETE: "incomplete",
    GangState.BROKEN: "invalid",
    GangState.FINISHING: "releasing",
}
NOT_BOUND_STATE = "not bound"
RECENT_RECLAIMS = 20


def gpus(milli: int | None) -> float | None:
    return None if milli is None else round(milli / MILLI, 3)


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: str
    namespaces: list[str]
    quota: float | None  # GPUs; None: unlimited
    used: float
    borrowed: float
    lent: float
    borrowing: str  # "no", "yes", "up to N"
    weight: float
    pods: int  # pods holding GPUs
    waiting_gangs: int
    waiting_gpus: float
    in_policy: bool = True


@dataclass(frozen=True, slots=True)
class WaitingGang:
    gang: str  # namespace/gang
    tenant: str
    state: str
    position: int | None  # 1-based, in the tenant's queue (what the controller tells users)
    overall: int | None  # 1-based, in the solver's order over every tenant
    pods: int  # pods that exist
    size: int
    gpus: float
    waited_seconds: float | None
    reason: str | None  # the Waiting condition's reason (None: not told yet)
    message: str | None
    since: str | None  # the condition's lastTransitionTime


@dataclass(frozen=True, slots=True)
class Reservation:
    gang: str
    tenant: str
    detail: str


@dataclass(frozen=True, slots=True)
class Reclaim:
    time: str | None
    pod: str
    message: str


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: int | None
    gpus: float | None  # on usable nodes (ready, not cordoned)
    unusable_gpus: float | None
    held: float  # by every pod that holds GPUs
    held_outside_berth: float  # by pods with no tenant (Berth did not admit them)
    free: float | None


@dataclass(slots=True)
class Status:
    generated_at: str
    policy: str  # where the policy came from
    policy_generation: str
    controller: str
    namespaces: list[str] | None  # None: all
    cluster: Cluster
    tenants: list[TenantRow]
    waiting: list[WaitingGang]
    reservations: list[Reservation] = field(default_factory=list)
    reclaims: list[Reclaim] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def waiting_condition(pods: list[Obj]) -> Obj | None:
    """The most recent ``berth.dev/Waiting`` condition among ``pods`` (the controller writes
    the same one on every pod of a gang; a budgeted cycle may not have reached them all)."""
    best: Obj | None = None
    for p in pods:
        cond = tr.pod_condition(p, keys.CONDITION_WAITING)
        if cond is not None and (best is None or str(cond.get("lastTransitionTime") or "")
                                 > str(best.get("lastTransitionTime") or "")):
            best = cond
    return best


def _demand(info: GangInfo) -> int:
    if info.gang is not None:
        return info.gang.gpu_demand_milli
    total = 0
    for p in info.pods:
        try:
            count, per, _ = tr.pod_gpu_demand(p)
        except TranslationError:
            continue
        total += count * per
    return total


def positions(snapshot: Snapshot, pending: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(gangs ahead in the tenant's queue, gangs ahead overall) by gang, in the solver's order
    (:func:`solver.queue.queue_order`, as the controller's "N gangs ahead")."""
    ahead = gangs_ahead(snapshot, pending)
    names = set(pending)
    overall = [g.name for g in queue_order(snapshot) if g.name in names]
    return ahead, {name: i for i, name in enumerate(overall)}


def controller_line(pic: Picture) -> str:
    view = pic.view
    if view.lease is None:
        return view.lease_error or "unknown"
    spec = view.lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renewed = tr.parse_time(spec.get("renewTime"))
    if not holder or renewed is None:
        return "no leader: nothing is released until a replica leads"
    age = max(0.0, (pic.now - renewed).total_seconds())
    duration = float(spec.get("leaseDurationSeconds") or 15)
    # Judged by this machine's clock, which may disagree with the replicas' (the replicas
    # themselves judge by watching renewTime change): said as such, not as a fact.
    if age > duration:
        return (f"no leader? {holder}'s Lease was last renewed {duration_words(age)} ago by "
                f"this machine's clock (lease {duration:g}s); without a leader nothing is "
                "released")
    return f"leader {holder} (Lease renewed {duration_words(age)} ago)"


def duration_words(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def tenant_rows(pic: Picture, waiting: list[WaitingGang]) -> list[TenantRow]:
    policy = pic.view.policy
    quotas = {t.name: t.quota_milli for t in pic.settings.tenants}
    over = {n: max(0, pic.used.get(n, 0) - q) for n, q in quotas.items() if q is not None}
    idle = {n: max(0, q - pic.used.get(n, 0)) for n, q in quotas.items() if q is not None}
    borrowed_total, idle_total = sum(over.values()), sum(idle.values())
    share = min(1.0, borrowed_total / idle_total) if idle_total else 0.0
    pods = Counter(h.tenant for h in pic.holders if h.tenant is not None)
    queued = Counter(w.tenant for w in waiting)
    queued_milli: Counter[str] = Counter()
    for w in waiting:
        queued_milli[w.tenant] += round(w.gpus * MILLI)
    rows = []
    for t in pic.settings.tenants:
        pt = policy.tenant(t.name)
        if not t.can_borrow:
            borrowing = "no"
        elif t.borrow_limit_milli is not None:
            borrowing = f"up to {gpus(t.borrow_limit_milli):g}"
        else:
            borrowing = "yes"
        rows.append(TenantRow(
            tenant=t.name, namespaces=list(pt.namespaces) if pt else [],
            quota=gpus(t.quota_milli), used=gpus(pic.used.get(t.name, 0)) or 0.0,
            borrowed=gpus(over.get(t.name, 0)) or 0.0,
            lent=gpus(round(idle.get(t.name, 0) * share)) or 0.0,
            borrowing=borrowing, weight=t.weight, pods=pods[t.name],
            waiting_gangs=queued[t.name], waiting_gpus=gpus(queued_milli[t.name]) or 0.0))
    # Pods labelled for a tenant the policy no longer has still hold GPUs: shown, not hidden.
    for name in sorted(set(pic.used) - set(quotas)):
        rows.append(TenantRow(
            tenant=name, namespaces=[], quota=None, used=gpus(pic.used[name]) or 0.0,
            borrowed=0.0, lent=0.0, borrowing="-", weight=0.0, pods=pods[name],
            waiting_gangs=queued[name], waiting_gpus=gpus(queued_milli[name]) or 0.0,
            in_policy=False))
    return rows


def waiting_gangs(pic: Picture) -> list[WaitingGang]:
    built = pic.built
    pending = [g.key for g in built.by_state(GangState.PENDING)]
    ahead, overall = positions(built.snapshot, pending)
    out: list[WaitingGang] = []
    for info in built.gangs.values():
        cond = waiting_condition(info.gated)
        waited = (pic.now - info.first_created).total_seconds() if info.first_created else None
        pos = ahead.get(info.key)
        out.append(WaitingGang(
            gang=info.key, tenant=info.tenant, state=STATE_WORDS[info.state],
            position=None if pos is None else pos + 1,
            overall=None if info.key not in overall else overall[info.key] + 1,
            pods=len(info.pods), size=info.size, gpus=gpus(_demand(info)) or 0.0,
            waited_seconds=None if waited is None else max(0.0, waited),
            reason=cond.get("reason") if cond else None,
            message=cond.get("message") if cond else None,
            since=cond.get("lastTransitionTime") if cond else None))
    out.extend(_not_bound(pic, set(built.gangs)))
    rank = {"queued": 0, STATE_WORDS[GangState.QUEUED]: 1, "incomplete": 2, "invalid": 3,
            "releasing": 4, NOT_BOUND_STATE: 5}
    out.sort(key=lambda w: (w.tenant, rank.get(w.state, 9), w.position or 0, w.gang))
    return out


def _tenant(pic: Picture, pod: Obj) -> str:
    """The pod's tenant as the controller takes it: its namespace's ("" when unmanaged)."""
    return trust.tenant_of(pod, pic.settings) or ""


def _not_bound(pic: Picture, seen: set[str]) -> list[WaitingGang]:
    """Released gangs whose scheduler has not bound them: the controller says so on the pods
    (``NotBound``, :mod:`admission.controller.unbound`); shown beside the queue."""
    by_gang: dict[str, list[Obj]] = {}
    for pod in pic.pods.values():
        cond = tr.pod_condition(pod, keys.CONDITION_WAITING)
        if (cond is None or cond.get("reason") != NOT_BOUND or cond.get("status") != "True"
                or tr.spec(pod).get("nodeName") or tr.has_berth_gate(pod)):
            continue
        key = tr.gang_name(pod)
        if key not in seen:
            by_gang.setdefault(key, []).append(pod)
    out = []
    for key, pods in sorted(by_gang.items()):
        cond = waiting_condition(pods) or {}
        milli = 0
        for p in pods:
            shares = tr.assigned_shares(p)
            milli += sum(s.milli for s in shares[1]) if shares else 0
        created = [t for p in pods if (t := tr.created_at(p))]
        waited = (pic.now - min(created)).total_seconds() if created else None
        out.append(WaitingGang(
            gang=key, tenant=_tenant(pic, pods[0]), state=NOT_BOUND_STATE, position=None,
            overall=None, pods=len(pods), size=len(pods), gpus=gpus(milli) or 0.0,
            waited_seconds=waited, reason=cond.get("reason"), message=cond.get("message"),
            since=cond.get("lastTransitionTime")))
    return out


def reservations(pic: Picture) -> list[Reservation]:
    """Gangs holding a reservation, read from the annotation or the Waiting reason that
    :mod:`admission.status.keys` names (none until the controller writes them)."""
    by_gang: dict[str, Reservation] = {}
    for pod in pic.pods.values():
        ann = tr.annotations_of(pod).get(keys.ANNOTATION_RESERVATION)
        cond = tr.pod_condition(pod, keys.CONDITION_WAITING)
        reserved = cond is not None and cond.get("reason") == keys.REASON_RESERVED
        if not ann and not reserved:
            continue
        key = tr.gang_name(pod)
        detail = ann or str((cond or {}).get("message") or "")
        by_gang.setdefault(key, Reservation(gang=key, tenant=_tenant(pic, pod), detail=detail))
    return sorted(by_gang.values(), key=lambda r: (r.tenant, r.gang))


def reclaims(pic: Picture) -> list[Reclaim]:
    out = []
    for ev in pic.view.events:
        source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent")
        if ev.get("reason") != keys.REASON_RECLAIMED or source != keys.EVENT_COMPONENT:
            continue
        obj = ev.get("involvedObject") or {}
        when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
        out.append(Reclaim(time=str(when) if when else None,
                           pod=f"{obj.get('namespace', '')}/{obj.get('name', '')}",
                           message=str(ev.get("message") or "")))
    out.sort(key=lambda r: r.time or "", reverse=True)
    return out[:RECENT_RECLAIMS]


def cluster_line(pic: Picture) -> Cluster:
    held = sum(h.milli for h in pic.holders)
    outside = sum(h.milli for h in pic.holders if h.tenant is None)
    if not pic.nodes_known:
        return Cluster(nodes=None, gpus=None, unusable_gpus=None, held=gpus(held) or 0.0,
                       held_outside_berth=gpus(outside) or 0.0, free=None)
    snap = pic.built.snapshot
    usable = [n for n in snap.nodes if n.usable]
    held_on: Counter[str] = Counter()
    per_gpu: Counter[tuple[str, int]] = Counter()
    for r in snap.running:
        for s in r.gpus:
            per_gpu[(r.node, s.index)] += s.milli
            held_on[r.node] += s.milli
    free = sum(max(0, MILLI - per_gpu[(n.name, g.index)]) for n in usable for g in n.gpus)
    total = sum(len(n.gpus) for n in usable) * MILLI
    unusable = sum(len(n.gpus) for n in snap.nodes if not n.usable) * MILLI
    return Cluster(nodes=len(snap.nodes), gpus=gpus(total), unusable_gpus=gpus(unusable),
                   held=gpus(held) or 0.0, held_outside_berth=gpus(outside) or 0.0,
                   free=gpus(free))


def status(pic: Picture) -> Status:
    waiting = waiting_gangs(pic)
    view = pic.view
    notes = list(view.notes)
    for name, err in sorted(pic.built.node_errors.items()):
        notes.append(f"node {name} left out, as the controller leaves it: {err}")
    return Status(
        generated_at=tr.rfc3339(pic.now), policy=view.policy_source,
        policy_generation=view.policy.generation, controller=controller_line(pic),
        namespaces=None if view.namespaces is None else list(view.namespaces),
        cluster=cluster_line(pic), tenants=tenant_rows(pic, waiting), waiting=waiting,
        reservations=reservations(pic), reclaims=reclaims(pic), skipped=dict(view.skipped),
        notes=notes)

