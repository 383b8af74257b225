"""``berth explain POD``: why this one pod waits and what would let it start. Pure: from a
:class:`~admission.status.model.Picture`, the pod as read just now and its Events.

Everything said is derived from what the cluster shows: Berth's gate and plan annotations, the
``berth.dev/Waiting`` condition the controller wrote, the gang as the controller groups it, its
place in the solver's queue order, its tenant's quota as the quota rule judges it
(:func:`solver.queue.quota_reason`), and the free capacity of the snapshot. What cannot be
known from there (when running pods end, what a foreign gate's owner will decide) is said to
be unknown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from admission import constants as c
from admission.controller import translate as tr
from admission.controller import trust
from admission.controller.snapshot import GangInfo, GangState
from admission.controller.translate import Obj
from admission.controller.unbound import NOT_BOUND, scheduler_says
from admission.status import keys
from admission.status.capacity import analyse
from admission.status.model import Holder, Picture
from admission.status.report import duration_words, gpus, positions, waiting_condition
from solver.queue import quota_reason
from solver.types import MILLI, Gang

HOLDERS_SHOWN = 5
AHEAD_SHOWN = 3
EVENTS_SHOWN = 5


@dataclass(slots=True)
class Explanation:
    pod: str  # namespace/name
    state: str  # waiting | incomplete | invalid | releasing | released, not bound | bound | ...
    phase: str | None
    tenant: str | None
    gang: str | None
    gang_pods: str | None  # "2 of 2 pods exist"
    demand: str | None  # "2 pods x 8 GPUs (NVIDIA-H100-80GB-HBM3), required:rack"
    waited: str | None
    position: int | None  # 1-based in the tenant's queue
    ahead: int | None
    overall: int | None  # 1-based in the solver's order over every tenant
    condition: dict[str, str] | None  # the Waiting condition: status, reason, message, since
    plan: dict[str, str]  # Berth's assignment annotations
    gates: list[str]
    scheduler: str | None  # what the pod's scheduler says (its PodScheduled condition)
    events: list[dict[str, str]]
    why: list[str] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}{'' if n == 1 else 's'}"


def describe_gang(gang: Gang) -> str:
    shapes: Counter[tuple[int, int, frozenset[str]]] = Counter(
        (p.gpu_count, p.gpu_milli, p.models) for p in gang.pods)
    parts = []
    for (count, milli, models), n in shapes.items():
        what = (f"{milli} milli-GPU" if count == 1 and milli < MILLI
                else _plural(count, "GPU"))
        model = f" ({'/'.join(sorted(models))})" if models else ""
        parts.append(f"{_plural(n, 'pod')} x {what}{model}")
    text = " + ".join(parts)
    if gang.topology is not None:
        text += f", {gang.topology.mode.value}:{gang.topology.level}"
    return text


def _events(events: Sequence[Obj]) -> list[dict[str, str]]:
    def when(ev: Obj) -> str:
        return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
                   or "")

    out = []
    for ev in sorted(events, key=when)[-EVENTS_SHOWN:]:
        source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or ""
        out.append({"time": when(ev), "type": str(ev.get("type") or ""),
                    "reason": str(ev.get("reason") or ""), "from": str(source),
                    "message": str(ev.get("message") or "")})
    return out


def _holders_line(pic: Picture, tenant: str) -> str:
    mine = sorted((h for h in pic.holders if h.tenant == tenant),
                  key=lambda h: (h.since is None, h.since))
    if not mine:
        return f"{tenant} holds no GPUs in the pods read"

    def one(h: Holder) -> str:
        age = f", {duration_words((pic.now - h.since).total_seconds())}" if h.since else ""
        return f"{h.pod} ({gpus(h.milli):g} GPU on {h.node}{age})"

    shown = ", ".join(one(h) for h in mine[:HOLDERS_SHOWN])
    more = f" and {len(mine) - HOLDERS_SHOWN} more" if len(mine) > HOLDERS_SHOWN else ""
    return (f"{tenant}'s GPUs free up when its own pods end; Berth cannot know when (pods "
            f"carry no run time): {shown}{more}")


def quota_lines(pic: Picture, gang: Gang, told: str = "") -> tuple[list[str], list[str]]:
    """(why, needs) from the tenant's quota, by the rule the solver and checker apply
    (``told``: what the controller said already, not repeated)."""
    snap = pic.built.snapshot
    tenant = pic.settings.tenant(gang.tenant)
    if tenant is None:
        return [], []
    used = pic.used.get(tenant.name, 0)
    demand = gang.gpu_demand_milli
    reason = quota_reason(snap, gang, pic.used)
    q, u, d = gpus(tenant.quota_milli), gpus(used) or 0.0, gpus(demand) or 0.0
    if reason is None:
        if q is None:
            return [f"tenant {tenant.name} has no GPU quota: quota never holds it back"], []
        return [f"tenant {tenant.name} has room: it uses {u:g} of its {q:g} GPUs and this gang "
                f"needs {d:g}"], []
    assert tenant.quota_milli is not None  # quota_reason only objects to a tenant with one
    after = used + demand
    over = after - tenant.quota_milli
    why = [f"tenant {tenant.name} at quota: it uses {u:g} of its {q:g} GPUs and this gang "
           f"needs {d:g}" + ("" if reason in told else f" ({reason})")]
    holders = _holders_line(pic, tenant.name)
    if not tenant.can_borrow:
        return why, [f"{gpus(over):g} of {tenant.name}'s GPUs must free up first: borrowing "
                     f"is disabled for {tenant.name} in the policy", holders]
    limit = tenant.borrow_limit_milli
    if limit is not None and over > limit:
        return why, [f"it would borrow {gpus(over):g} GPUs beyond its quota, above its "
                     f"borrowing limit of {gpus(limit):g}: {gpus(over - limit):g} of "
                     f"{tenant.name}'s GPUs must free up first", holders]
    idle = sum(max(0, (t.quota_milli or 0) - pic.used.get(t.name, 0))
               for t in pic.settings.tenants if t.quota_milli is not None
               and t.name != tenant.name)
    return why, [f"it would borrow {gpus(over):g} GPUs of other tenants' idle quota, and "
                 f"other tenants leave {gpus(idle):g} idle with what is borrowed already "
                 "counted against it: it starts when borrowers' pods end, or when "
                 f"{tenant.name}'s own do", holders]


def _queue_lines(pic: Picture, info: GangInfo, ahead: int) -> list[str]:
    if ahead <= 0:
        return []
    snap = pic.built.snapshot
    pending = [g.key for g in pic.built.by_state(GangState.PENDING) if g.tenant == info.tenant]
    _, overall = positions(snap, pending)
    first = sorted((k for k in pending if overall[k] < overall.get(info.key, 0)),
                   key=lambda k: overall[k])[:AHEAD_SHOWN]
    aging = snap.policy.weights.aging_per_hour
    q = snap.policy.queueing
    short = (f", plus up to {q.short_run_bonus:g} for a deadline shorter than "
             f"{q.short_run_s:g} s" if q.short_run_bonus > 0 else "")
    verb = "comes" if ahead == 1 else "come"
    return [f"{_plural(ahead, 'gang')} of {info.tenant} {verb} first in the solver's order "
            f"(priority, plus {aging:g} per hour waited{short}): {', '.join(first)}"
            + (" ..." if ahead > len(first) else "")]


def _foreign_gates(pod: Obj, gates: list[str]) -> list[str]:
    out = []
    ns = tr.meta(pod).get("namespace", "")
    for g in gates:
        if g == c.SCHEDULING_GATE:
            continue
        if g == c.KUEUE_GATE:
            queue = tr.labels(pod).get(c.KUEUE_QUEUE_LABEL) or "(no queue label)"
            out.append(f"Kueue's gate {g} is on: Kueue admits the pod's Workload from "
                       f"LocalQueue {queue} (kubectl get workloads -n {ns}); Berth removes "
                       "only its own gate")
        else:
            out.append(f"gate {g} is another controller's: that controller decides when it "
                       "goes")
    return out


def _volcano_lines(pod: Obj, podgroup: Obj | None, podgroup_error: str | None) -> list[str]:
    if (tr.spec(pod).get("schedulerName") or "") != c.VOLCANO_SCHEDULER:
        return []
    ann = tr.annotations_of(pod)
    group = ann.get(c.VOLCANO_GROUP_ANNOTATION)
    queue = ann.get(c.VOLCANO_QUEUE_ANNOTATION) or "(no queue annotation)"
    if not group:
        return ["Volcano schedules it (schedulerName volcano); it names no PodGroup yet"]
    line = f"Volcano schedules it with PodGroup {group} in queue {queue}"
    if podgroup is not None:
        status = podgroup.get("status") or {}
        conds = status.get("conditions") or []
        last = conds[-1] if conds else {}
        said = " ".join(str(last.get(k) or "") for k in ("reason", "message")).strip()
        line += f": phase {status.get('phase') or 'unknown'}" + (f" ({said})" if said else "")
    elif podgroup_error:
        line += f" (the PodGroup could not be read: {podgroup_error})"
    return [line]


def _visibility(pic: Picture) -> list[str]:
    out = []
    if not pic.nodes_known:
        out.append("free capacity: nodes could not be read, so whether the gang fits now is "
                   "unknown")
    if pic.view.skipped:
        out.append(f"namespace {', '.join(sorted(pic.view.skipped))} could not be read: gangs "
                   "there may be ahead of this one and hold GPUs not counted here")
    if pic.view.namespaces is not None and pic.nodes_known:
        out.append("pods outside the policy's namespaces could not be read: GPUs they hold "
                   "are not counted, so the free capacity shown may be too high")
    return out


def explain(pic: Picture, pod: Obj, events: Sequence[Obj], *, podgroup: Obj | None = None,
            podgroup_error: str | None = None, events_error: str | None = None
            ) -> Explanation:
    key = tr.pod_key(pod)
    ns = tr.meta(pod).get("namespace", "")
    ann = tr.annotations_of(pod)
    gates = tr.gate_names(pod)
    cond = tr.pod_condition(pod, keys.CONDITION_WAITING)
    phase = (pod.get("status") or {}).get("phase")
    plan = {k: ann[k] for k in c.ASSIGNMENT_ANNOTATIONS if k in ann}
    berth = c.SCHEDULING_GATE in gates or bool(plan.get(c.ANNOTATION_ASSIGNED_NODE))
    out = Explanation(
        pod=key, state="", phase=phase,
        tenant=trust.tenant_of(pod, pic.settings) if berth else None,
        gang=tr.gang_name(pod) if berth else None, gang_pods=None, demand=None, waited=None,
        position=None, ahead=None, overall=None,
        condition=None if cond is None else {
            k: str(cond.get(f) or "") for k, f in (("status", "status"), ("reason", "reason"),
                                                  ("message", "message"),
                                                  ("since", "lastTransitionTime"))},
        plan=plan, gates=gates, scheduler=scheduler_says(pod), events=_events(events))
    if events_error:
        out.unknown.append(f"events: {events_error}")
    foreign = _foreign_gates(pod, gates)
    volcano = _volcano_lines(pod, podgroup, podgroup_error)

    if tr.is_finished(pod):
        out.state = "finished"
        out.why.append(f"the pod has finished ({phase}): nothing waits")
        return out
    if not berth:
        _not_berths(pic, pod, out, ns)
        out.why.extend(foreign + volcano)
        return out
    if c.SCHEDULING_GATE in gates:
        if pic.view.namespaces is None or ns in pic.view.namespaces:
            _gated(pic, pod, out)
        else:
            _unlisted(pod, out, ns)
        out.why.extend(f"after Berth: {line}" for line in foreign + volcano)
        return out
    _released(pod, out, cond)
    out.why.extend(foreign + volcano)
    if not tr.spec(pod).get("nodeName") and (foreign or volcano):
        out.needs.append("Berth's part is done: " + ("the other gate's owner" if foreign
                                                      else "Volcano") + " decides now")
    return out


def _not_berths(pic: Picture, pod: Obj, out: Explanation, ns: str) -> None:
    node = tr.spec(pod).get("nodeName")
    out.state = "bound" if node else "not held by Berth"
    if pic.view.policy.tenant_for_namespace(ns) is None:
        out.why.append(f"namespace {ns} is not in the policy: Berth's webhook lets its pods "
                       "pass untouched")
    elif tr.labels(pod).get(c.LABEL_MANAGED) != "true":
        out.why.append("Berth did not gate this pod: it holds only pods that ask for GPUs "
                       "(it carries no berth.dev/managed label)")
    else:
        out.why.append("Berth admitted this pod but holds no gate on it and wrote no plan")
    if node:
        out.why.append(f"bound to node {node}, phase {out.phase}")
    elif out.scheduler:
        out.why.append(f"{tr.spec(pod).get('schedulerName') or 'default-scheduler'} says: "
                       f"{out.scheduler}")


def _gated(pic: Picture, pod: Obj, out: Explanation) -> None:
    built = pic.built
    info = built.gangs.get(tr.gang_name(pod))
    if info is None:  # not in the picture: the controller's grouping never saw it
        out.state = "waiting"
        out.unknown.append("the pod's gang could not be rebuilt from the pods read")
        return
    out.gang_pods = (f"{len(info.pods)} of {_plural(info.size, 'pod')}: "
                     f"{len(info.gated)} gated, {len(info.released)} released")
    if info.first_created:
        out.waited = duration_words((pic.now - info.first_created).total_seconds())
    said = waiting_condition(info.gated)
    if said is not None:
        out.why.append(f"the controller says ({said.get('reason')}): {said.get('message')}")
    else:
        window = pic.settings.window_seconds
        out.why.append(f"the controller has not said why yet: it writes a reason at the end "
                       f"of the batch window after the pod arrived (every {window:g}s)")
    if info.state == GangState.BROKEN:
        out.state = "invalid"
        out.why.append(f"the controller cannot read the gang: {info.error}")
        out.needs.append("fix the value named above; a pod's spec cannot change, so delete "
                         "and recreate the pod (or its Job)")
        return
    if info.state == GangState.INCOMPLETE:
        out.state = "incomplete"
        missing = info.size - len(info.pods)
        out.needs.append(f"the gang's other {_plural(missing, 'pod')} must exist: {info.key} "
                         f"has {len(info.pods)} of {info.size} ({c.ANNOTATION_GANG_SIZE}); it "
                         "is considered once all exist")
        return
    if info.state == GangState.FINISHING:
        out.state = "releasing"
        out.why.append(f"a release is under way: every pod carries plan {info.plan}")
        out.needs.append("nothing: the controller's next cycle opens the remaining gates")
        return
    out.state = "waiting"
    gang = info.gang
    assert gang is not None  # a pending gang always has its solver view
    out.demand = describe_gang(gang)
    pending = [g.key for g in built.by_state(GangState.PENDING)]
    ahead, overall = positions(built.snapshot, pending)
    out.ahead = ahead.get(info.key)
    out.position = None if out.ahead is None else out.ahead + 1
    out.overall = None if info.key not in overall else overall[info.key] + 1
    why_q, needs_q = quota_lines(pic, gang, told=str((said or {}).get("message") or ""))
    out.why.extend(why_q)
    fit = analyse(built.snapshot, gang) if pic.nodes_known else None
    if fit is not None:
        if fit.fits:
            out.why.append("it fits in the free capacity now, on its own (best-fit, quotas "
                           "aside)")
        else:
            says = fit.solver_says or "no placement found"
            out.why.append("it does not fit in the free capacity now, even alone (best-fit, "
                           "quotas aside)" + ("" if says in str((said or {}).get("message"))
                                              else f": {says}"))
    queue = _queue_lines(pic, info, out.ahead or 0)
    out.needs.extend(needs_q)
    if fit is not None and not fit.fits:
        out.needs.extend(fit.lines)
    if not needs_q and (fit is None or fit.fits):
        reason = (said or {}).get("reason")
        if reason == "PlanRejected":
            out.needs.append("the controller's last plan failed its feasibility check; it "
                             "plans again next window")
        elif reason == "HeldForReservation":
            out.needs.append("the room it fits in is held for another gang's reservation, "
                             "which starts there soon (the controller's message says where "
                             "and when): it starts when room that is not held frees, or once "
                             "that gang has started; a pod whose own activeDeadlineSeconds "
                             "ends before the reserved start may use held room")
        elif fit is not None:
            window = pic.settings.window_seconds
            out.needs.append("nothing visible keeps it out now: it fits on its own and its "
                             "tenant has quota; the controller decides at its next batch "
                             f"window (every {window:g}s)" + (", after the gangs ahead" if
                                                              queue else ""))
    out.needs.extend(queue)
    out.unknown.extend(_visibility(pic))


def _unlisted(pod: Obj, out: Explanation, ns: str) -> None:
    """A gated pod whose namespace could not be listed: no guess about its gang."""
    out.state = "waiting"
    said = waiting_condition([pod])
    if said is not None:
        out.why.append(f"the controller says ({said.get('reason')}): {said.get('message')}")
    out.unknown.append(f"pods of namespace {ns} could not be listed: the gang, its tenant's "
                       "usage and the queue cannot be rebuilt, so only what the controller "
                       "last wrote on the pod is shown")


def _released(pod: Obj, out: Explanation, cond: Obj | None) -> None:
    plan = out.plan
    node = tr.spec(pod).get("nodeName")
    target = plan.get(c.ANNOTATION_ASSIGNED_NODE)
    at = plan.get(c.ANNOTATION_ASSIGNED_AT, "?")
    released = (f"Berth released it at {at} (plan {plan.get(c.ANNOTATION_PLAN, '?')}) to node "
                f"{target}, GPUs {plan.get(c.ANNOTATION_ASSIGNED_GPUS, '?')}")
    out.why.append(released)
    if node:
        out.state = "bound"
        out.why.append(f"bound to node {node}, phase {out.phase}"
                       + ("" if node == target else f" (not the node Berth chose, {target})"))
        return
    out.state = "released, not bound"
    scheduler = tr.spec(pod).get("schedulerName") or "default-scheduler"
    out.why.append(f"{scheduler} has not bound it; it says: {out.scheduler or 'nothing yet'}")
    if cond is not None and cond.get("reason") == NOT_BOUND:
        out.why.append(f"the controller says (NotBound): {cond.get('message')}")
    out.needs.append(f"{scheduler} must bind it to {target}; Berth keeps its GPUs held "
                     "meanwhile and cannot gate it again. If the scheduler refuses it, fix "
                     "what it names or delete the pod")
