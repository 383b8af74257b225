"""Every pod that waits says why: a pod condition (``kubectl describe pod`` shows it) and an
Event, e.g. ``waiting: quota: tenant team-a would use 20000 of its 16000 milli-GPU and may not
borrow; 3 gangs ahead``. The quota reason and the place in the queue are the solver's own
(:mod:`solver.queue`): the gangs ahead are those of the same tenant the solver serves first.

Messages are written only when they change, and at most ``budget`` writes per cycle, so ten
thousand waiting pods cost a trickle of writes, not ten thousand per window. The wait time
itself is left out of the message for that reason; it is in the metrics and the cycle log.
For the same reason a reserved start is told as a time, not as a countdown: the solver says
"expected to start in 540 s"; the pod says "expected to start at 2026-12-07T19:31:00Z", rounded
up to the minute, which changes only when the plan does (and is still right when read later).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from admission.controller import keys
from admission.controller import translate as tr
from admission.controller.api import ApiError, ClusterApi, NotFound
from admission.controller.snapshot import Built, GangInfo, GangState, Refusal
from admission.controller.translate import Obj
from admission.controller.writers import Writers
from solver.plan import Plan
from solver.queue import queue_order, quota_reason
from solver.reserve import HELD
from solver.rules import quota_usage_milli
from solver.types import Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Why:
    reason: str  # CamelCase, the condition's and the Event's reason
    message: str
    waiting: bool = True
    warning: bool = False


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def gangs_ahead(snapshot: Snapshot, waiting: Iterable[str]) -> dict[str, int]:
    """For each gang named in ``waiting``: how many of its tenant's waiting gangs come before
    it in the solver's queue order."""
    names = set(waiting)
    seen: Counter[str] = Counter()
    ahead: dict[str, int] = {}
    for gang in queue_order(snapshot):
        if gang.name in names:
            ahead[gang.name] = seen[gang.tenant]
            seen[gang.tenant] += 1
    return ahead


def _broken(g: GangInfo) -> Why:
    """A gang Berth cannot read, or reads and does not believe (:class:`Refusal`)."""
    message = f"waiting: {g.error}"
    if g.refusal == Refusal.DEMAND:
        return Why("DemandMismatch", message, warning=True)
    if g.refusal == Refusal.GANG_SIZE:
        return Why("GangSizeMismatch", message, warning=True)
    if g.refusal == Refusal.GANG_TOO_LARGE:
        return Why("GangTooLarge", message, warning=True)
    return Why("InvalidPod", message, warning=True)


#: The start of the solver's reason for a gang capacity is held for (solver/reserve.py).
RESERVED = "reserved: "
RECLAIM = "reclaim: "  # solver/reclaim.py's deferrals
#: How the solver words a reserved start (solver/reserve.py): seconds from the window's start.
_START_IN = re.compile(r"expected to start in (\d+(?:\.\d+)?) s\b")


def start_at(now: datetime, in_s: float) -> str:
    """The time ``in_s`` seconds after ``now``, rounded up to the minute (RFC 3339, UTC)."""
    t = now + timedelta(seconds=in_s)
    whole = t.replace(second=0, microsecond=0)
    if whole != t:
        whole += timedelta(minutes=1)
    return tr.rfc3339(whole)


def _as_time(message: str, now: datetime) -> str:
    """``message`` with the solver's "expected to start in N s" as the time it means."""
    def at(m: re.Match[str]) -> str:
        seconds = float(m.group(1))
        if not math.isfinite(seconds):
            return m.group(0)
        try:
            return f"expected to start at {start_at(now, seconds)}"
        except (OverflowError, ValueError):  # past what a datetime holds: say it as it came
            return m.group(0)
    return _START_IN.sub(at, message)


def reasons(built: Built, plan: Plan | None, timeout_s: float, now: datetime,
            plan_rejected: str | None = None) -> dict[str, Why]:
    """Why each gang Berth holds is still waiting after this cycle, by gang key."""
    snap = built.snapshot
    deferred = {d.gang: d.reason for d in (plan.deferred if plan else ())}
    held = {r.gang: r.nodes for r in (plan.reservations if plan else ())}
    admitted = plan.admitted_names if plan else frozenset()
    used = quota_usage_milli(snap, plan)
    by_name = {g.name: g for g in snap.gangs}
    admitting = {by_name[a].tenant for a in admitted if a in by_name}
    ahead = gangs_ahead(snap, (g.key for g in built.gangs.values()
                               if g.state == GangState.PENDING and g.key not in admitted))
    out: dict[str, Why] = {}
    for g in built.gangs.values():
        if g.state == GangState.BROKEN:
            out[g.key] = _broken(g)
        elif g.state == GangState.INCOMPLETE:
            have = len(g.pods)
            age = (now - g.first_created).total_seconds() if g.first_created else 0.0
            if age > timeout_s:
                out[g.key] = Why("GangTimedOut", f"waiting: gang {g.key} has {have} of {g.size} "
                                 f"pods after {int(age)}s (timeout {int(timeout_s)}s); the "
                                 "missing pods were never created", warning=True)
            else:
                out[g.key] = Why("GangIncomplete", f"waiting: gang {g.key} has {have} of "
                                 f"{g.size} pods; it is considered once all exist")
        elif g.state == GangState.QUEUED:
            out[g.key] = Why("QueueAdmission", f"waiting: {g.error}")
        elif g.state == GangState.PENDING and g.key not in admitted:
            n = ahead.get(g.key, 0)
            tail = f"; {_plural(n, 'gang')} ahead"
            if plan_rejected:
                out[g.key] = Why("PlanRejected", f"waiting: {plan_rejected}{tail}")
                continue
            quota = quota_reason(snap, g.gang, used, admitting) if g.gang else None
            reserved = deferred.get(g.key, "")
            if reserved.startswith(RESERVED):
                ends = _end_sources(built, held.get(g.key, ()))
                out[g.key] = Why("Reserved",
                                 f"waiting: {_as_time(reserved, now)}{ends}{tail}")
            elif reserved.startswith(RECLAIM):
                out[g.key] = Why("Reclaim", f"waiting: {reserved}{tail}")
            elif reserved.startswith(HELD) and quota is None:
                out[g.key] = Why("HeldForReservation",
                                 f"waiting: {_as_time(reserved, now)}{tail}")
            elif quota is not None:
                out[g.key] = Why("Quota", f"waiting: {quota}{tail}")
            else:
                why = deferred.get(g.key) or "no room for the whole gang this window"
                out[g.key] = Why("Deferred", f"waiting: {why}{tail}")
    return out


def _end_sources(built: Built, nodes: tuple[str, ...]) -> str:
    """Where the expected ends of the pods running on ``nodes`` come from, as the Reserved
    message tells it: " (ends from: job-deadline, pod-deadline)" (runtimes.Source)."""
    where = set(nodes)
    found = sorted({str(built.end_sources[r.name]) for r in built.snapshot.running
                    if r.node in where and r.name in built.end_sources})
    return f" (ends from: {', '.join(found)})" if found else ""


def needs_update(pod: Obj, why: Why) -> bool:
    cond = tr.pod_condition(pod, keys.CONDITION_WAITING)
    status = "True" if why.waiting else "False"
    return cond is None or (cond.get("status"), cond.get("reason"), cond.get("message")) != (
        status, why.reason, why.message)


class Explainer:
    """Writes conditions and Events, within a per-cycle budget."""

    def __init__(self, *, api: ClusterApi, clock: Callable[[], datetime],
                 record: Callable[[Obj], object], forget: Callable[[Obj], object],
                 identity: str, writers: int = 1) -> None:
        self.api = api
        self.clock = clock
        self.record = record
        self.forget = forget  # drops a pod the API server says is gone from the inventory
        self.identity = identity
        self._writers = Writers(writers, "berth-explain")

    def tell(self, pods: Iterable[tuple[Obj, Why]], budget: int) -> int:
        """Write the condition (and an Event) on each pod whose message changed, up to
        ``budget`` pods, several at once; returns how many pods were written."""
        todo: list[tuple[Obj, Why]] = []
        for pod, why in pods:
            if len(todo) >= budget:
                break
            if needs_update(pod, why):
                todo.append((pod, why))

        def one(item: tuple[Obj, Why]) -> bool:
            try:
                self._write(*item)
            except NotFound as exc:
                self.forget(item[0])  # gone: the next cycle must not explain (or admit) it
                log.info("explaining %s: %s", tr.pod_key(item[0]), exc)
                return False
            except ApiError as exc:
                log.warning("explaining %s: %s", tr.pod_key(item[0]), exc)
                return False
            return True

        return sum(self._writers.each(one, todo, threading.Event()))

    def close(self) -> None:
        self._writers.close()

    def _write(self, pod: Obj, why: Why) -> None:
        m = tr.meta(pod)
        now = tr.rfc3339(self.clock())
        cond = {"type": keys.CONDITION_WAITING, "status": "True" if why.waiting else "False",
                "reason": why.reason, "message": why.message, "lastTransitionTime": now}
        new = self.api.set_pod_condition(m["namespace"], m["name"], cond)
        self.record(new)
        self.api.create_event(m["namespace"], {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": m["name"],
                               "namespace": m["namespace"], "uid": m.get("uid")},
            "reason": why.reason, "message": why.message,
            "type": "Warning" if why.warning else "Normal",
            "source": {"component": keys.EVENT_COMPONENT},
            "reportingComponent": keys.EVENT_COMPONENT, "reportingInstance": self.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })
