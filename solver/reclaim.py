"""Reclaim: a tenant waiting within its own quota takes GPUs back from tenants on borrowed quota.

Borrowing lends a tenant's idle quota to others; reclaim is what makes the lender's quota a
guarantee. After the window's plan (:func:`solver.reserve.solve_with_reservations`), for each
gang the plan leaves waiting, in queue order (:func:`solver.queue.queue_order`):

1. **Who may reclaim**: the gang's tenant has a quota and stays within it with the gang
   (usage after the plan plus the gang's demand <= its quota, no borrowing).
2. **From whom**: whole gangs of other tenants that are over their quota (borrowing): first
   gangs this plan admits for them (nothing has run yet: nothing is lost), then running gangs
   Berth placed (:attr:`solver.types.Running.gang`) whose every pod has run at least
   ``policy.reclaim.min_run_s``. A running gang is chosen only while its tenant is still over
   its quota once the gangs chosen before are gone, so a tenant within its quota loses
   nothing (the last gang taken from a tenant may take it below its quota: a gang larger than
   what its tenant borrows could otherwise keep borrowed GPUs for good). Only gangs with a pod
   on a node the waiting gang could use are looked at.
3. **In which order**: lowest priority first, then least run time lost (GPU-seconds run so
   far), then name.
4. **Only what helps, never more**: victims are added in that order until the waiting gang fits
   (best-fit, the placer the engine's order search uses) in what is free once they are gone;
   if it never fits, nothing is taken for it. Then each victim whose removal still lets it fit
   is given back, the last chosen first.
5. **Then**: the gang is admitted in this same plan where it fits, and the running gangs that
   must go are evicted by it (:attr:`solver.plan.Plan.evictions`): the plan is judged by the
   checker as a whole, its admissions on what is left once the evicted pods are gone (if it
   breaks a rule, nothing is taken for the gang). So what reclaim frees goes to the gang it
   was freed for, never to another gang of a later window; the controller releases the gang
   only once every eviction for it was accepted, and its pods bind when the evicted ones are
   gone. (A pod whose disruption was announced has ``remaining_s == 0`` and its capacity
   counts as freed, so a later window does not evict again for the same gang.)

**Preemption within a tenant** (``policy.reclaim.preempt_within_tenant``, off by default, on
or off whatever ``enabled`` says): a waiting gang may also take from its *own* tenant the gangs
of strictly lower priority (those this plan admits, then running ones that have run
``min_run_s``), chosen in the same order and by the same steps 3-5, after every gang of other
tenants that reclaim may take (quota lent is taken back before the tenant's own work is
stopped). Its evictions say so (:attr:`solver.plan.Eviction.preempt`). Other tenants' gangs
are never preempted: across tenants only borrowed quota is taken back.

At most ``policy.reclaim.max_gangs`` gangs are evicted per window. The checker judges every
eviction (:func:`solver.checker.check`). Pure: nothing beyond the snapshot and the plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer
from solver.checker import check
from solver.eligibility import why_not
from solver.names import SolverName
from solver.plan import Deferred, Eviction, GangPlacement, Plan
from solver.queue import queue_order
from solver.rules import quota_usage_milli
from solver.types import Gang, Node, Running, Snapshot

#: The name prefix of the stand-in running pods of gangs taken as placed while planning.
PLANNED_PREFIX = "reclaim/"


@dataclass(frozen=True, slots=True)
class Victim:
    """A gang that may be taken back: admitted by this plan (``running`` empty) or running."""

    gang: str
    tenant: str
    milli: int
    priority: int
    lost: float  # GPU milli-seconds run so far
    pods: tuple[Running, ...] = ()
    placement: GangPlacement | None = None
    preempt: bool = False  # of the waiting gang's own tenant, of lower priority

    @property
    def key(self) -> tuple[int, float, str]:
        return (self.priority, self.lost, self.gang)


def leaving(r: Running) -> bool:
    """A running pod that is being deleted (the controller says so with ``remaining_s`` 0)."""
    return r.remaining_s is not None and r.remaining_s <= 0


def running_gangs(snapshot: Snapshot) -> dict[str, list[Running]]:
    """Running pods of gangs Berth placed, by gang (pods of no tenant are never a gang's)."""
    out: dict[str, list[Running]] = defaultdict(list)
    for r in snapshot.running:
        if r.gang is not None and r.tenant is not None:
            out[r.gang].append(r)
    return dict(out)


def gang_run_s(pods: Sequence[Running]) -> float | None:
    """How long a running gang has run: as long as its youngest pod (None: one not started)."""
    runs = [r.run_s for r in pods]
    if any(x is None for x in runs):
        return None
    return min(x for x in runs if x is not None)


def _as_running(gang: Gang, gp: GangPlacement) -> tuple[Running, ...]:
    pods = {p.name: p for p in gang.pods}
    return tuple(Running(name=f"{PLANNED_PREFIX}{pp.pod}", node=pp.node,
                         cpu_milli=pods[pp.pod].cpu_milli, memory_mib=pods[pp.pod].memory_mib,
                         gpus=pp.gpus, tenant=gang.tenant, qos_class=pods[pp.pod].qos_class)
                 for pp in gp.pods)


def _fits(snapshot: Snapshot, gang: Gang, running: tuple[Running, ...]) -> GangPlacement | None:
    trial = replace(snapshot, gangs=(gang,), running=running)
    placer = GangPlacer(ClusterArrays(trial), SolverName.BESTFIT, np.random.default_rng(0))
    got = placer.place(gang)
    return None if isinstance(got, str) else got


def _useful(gang: Gang, nodes: dict[str, Node], victim_nodes: set[str]) -> bool:
    return any(why_not(p, nodes[n]) is None for n in victim_nodes if n in nodes
               for p in gang.pods)


def plan_reclaim(snapshot: Snapshot, plan: Plan, *,
                 waiting_order: Sequence[Gang] | None = None) -> Plan:
    """``plan`` with what reclaim takes back (the module's steps): gangs un-admitted for a
    waiting gang within its quota, which is then admitted, and running gangs evicted.
    ``waiting_order``: the order waiting gangs reclaim in (None: Berth's queue order; the Kueue-like
    baseline passes its own)."""
    rules = snapshot.policy.reclaim
    if not (rules.enabled or rules.preempt_within_tenant) or not plan.deferred:
        return plan
    quotas = {t.name: t.quota_milli for t in snapshot.tenants}
    gangs = {g.name: g for g in snapshot.gangs}
    nodes = {n.name: n for n in snapshot.nodes}
    admitted = {gp.gang: gp for gp in plan.admitted}
    waiting = [g for g in (queue_order(snapshot) if waiting_order is None else waiting_order)
               if g.name not in admitted and any(d.gang == g.name for d in plan.deferred)]
    used = quota_usage_milli(snapshot, plan)
    # the running pods and their gangs; pods being deleted are gone already
    by_gang = running_gangs(snapshot)
    running = [r for r in snapshot.running if not leaving(r)]
    removed: set[str] = set()  # running pods (by name) of gangs evicted so far
    evictions: list[Eviction] = []
    notes: dict[str, str] = {}
    changed = False
    if not rules.preempt_within_tenant and not any(quotas.get(g.tenant) is not None
                                                   for g in waiting):
        return plan
    for gang in waiting:
        quota = quotas.get(gang.tenant)
        reclaims = (rules.enabled and quota is not None
                    and used.get(gang.tenant, 0) + gang.gpu_demand_milli <= quota)
        if not reclaims and not rules.preempt_within_tenant:
            continue
        candidates: list[Victim] = []
        for name, gp in admitted.items():
            g = gangs[name]
            q = quotas.get(g.tenant)
            if reclaims and g.tenant != gang.tenant and q is not None \
                    and used.get(g.tenant, 0) > q:
                candidates.append(Victim(name, g.tenant, g.gpu_demand_milli, g.priority, 0.0,
                                         placement=gp))
            elif rules.preempt_within_tenant and g.tenant == gang.tenant \
                    and g.priority < gang.priority:
                candidates.append(Victim(name, g.tenant, g.gpu_demand_milli, g.priority, 0.0,
                                         placement=gp, preempt=True))
        if len(evictions) < rules.max_gangs:
            for name, pods in by_gang.items():
                if any(leaving(r) or r.name in removed for r in pods):
                    continue
                tenant = pods[0].tenant
                assert tenant is not None
                q = quotas.get(tenant)
                run = gang_run_s(pods)
                priority = max(r.priority for r in pods)
                if run is None or run < rules.min_run_s or any(r.tenant != tenant for r in pods):
                    continue
                if tenant == gang.tenant:
                    preempt = True
                    if not rules.preempt_within_tenant or priority >= gang.priority:
                        continue
                else:
                    preempt = False
                    if not reclaims or q is None or used.get(tenant, 0) <= q:
                        continue
                milli = sum(s.milli for r in pods for s in r.gpus)
                if milli == 0 or not _useful(gang, nodes, {r.node for r in pods}):
                    continue
                candidates.append(Victim(name, tenant, milli, priority,
                                         float(sum(s.milli * (r.run_s or 0.0)
                                                   for r in pods for s in r.gpus)),
                                         pods=tuple(pods), preempt=preempt))
        if not candidates:
            continue
        # un-admissions first (nothing run is lost), then running gangs in victim order; quota
        # lent to other tenants is taken back before the tenant's own gangs are preempted
        candidates.sort(key=lambda v: (v.placement is None, v.preempt, v.key))

        def state(chosen: list[Victim]) -> tuple[Running, ...]:
            gone = {r.name for v in chosen for r in v.pods}
            dropped = {v.gang for v in chosen if v.placement is not None}
            kept = [r for name, gp in admitted.items() if name not in dropped
                    for r in _as_running(gangs[name], gp)]
            return (*(r for r in running if r.name not in removed and r.name not in gone),
                    *kept)

        chosen: list[Victim] = []
        left = dict(used)
        found: GangPlacement | None = None
        for v in candidates:
            q = quotas.get(v.tenant)
            if not v.preempt and (q is None or left.get(v.tenant, 0) <= q):
                continue  # its tenant no longer borrows
            if v.placement is None and \
                    sum(1 for c in chosen if c.placement is None) + len(evictions) \
                    >= rules.max_gangs:
                continue
            chosen.append(v)
            left[v.tenant] = left.get(v.tenant, 0) - v.milli
            found = _fits(snapshot, gang, state(chosen))
            if found is not None:
                break
        if found is None:
            continue
        for v in reversed(list(chosen)):  # never more than needed
            rest = [c for c in chosen if c is not v]
            again = _fits(snapshot, gang, state(rest))
            if again is not None:
                chosen, found = rest, again
        dropped = [v for v in chosen if v.placement is not None]
        evicted = [v for v in chosen if v.placement is None]
        new_evictions = [Eviction(v.gang, v.tenant, tuple(sorted(r.name for r in v.pods)),
                                  gang.name, gang.tenant, preempt=v.preempt) for v in evicted]
        trial = [gp for name, gp in admitted.items() if name not in {v.gang for v in dropped}]
        candidate = replace(plan, admitted=(*trial, found), deferred=(),
                            evictions=(*evictions, *new_evictions))
        if check(snapshot, candidate):
            continue  # the plan with it and its evictions breaks a rule: take nothing for it
        for v in dropped:
            del admitted[v.gang]
            used[v.tenant] = used.get(v.tenant, 0) - v.milli
            notes[v.gang] = (
                f"preempted: gang {gang.name} of the same tenant, of higher priority "
                f"({gang.priority} > {v.priority}), needs the room" if v.preempt else
                f"reclaim: tenant {gang.tenant} takes back its quota, lent to "
                f"tenant {v.tenant}, for gang {gang.name}")
        for v in evicted:
            removed.update(r.name for r in v.pods)
            used[v.tenant] = used.get(v.tenant, 0) - v.milli
        evictions.extend(new_evictions)
        used[gang.tenant] = used.get(gang.tenant, 0) + gang.gpu_demand_milli
        admitted[gang.name] = found
        notes.pop(gang.name, None)
        changed = True
    if not changed:
        return plan
    order = [gp.gang for gp in plan.admitted]
    new_admitted = tuple(admitted[n] for n in order if n in admitted) + tuple(
        gp for n, gp in admitted.items() if n not in order)
    done = {gp.gang for gp in new_admitted}
    deferred = [Deferred(d.gang, notes.get(d.gang, d.reason)) for d in plan.deferred
                if d.gang not in done]
    deferred += [Deferred(n, notes[n]) for n in order if n not in done and n in notes]
    detail = dict(plan.stats.detail)
    detail["reclaimed"] = float(len(evictions))
    return replace(plan, admitted=new_admitted, deferred=tuple(deferred),
                   stats=replace(plan.stats, detail=detail), evictions=tuple(evictions))
