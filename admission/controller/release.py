"""The release protocol: write every pod's placement, then open the gates.

1. The backend prepares what its queue needs (a Volcano PodGroup).
2. Each pod of the gang gets its assignment annotations (node, GPUs, shares, plan id) and the
   backend's labels. A failure here stops the gang: no gate was touched, the gang stays
   pending and the next cycle plans it again (the annotations are simply overwritten).
3. Only when every pod carries the plan id does each pod get one guarded update that pins it to
   its node and removes Berth's gate. A crash half-way leaves the rest of the gang gated *with*
   the plan on every pod; the next cycle (of this or another replica) sees that the gang is
   "finishing" and completes it without solving again.

Every step is idempotent: patches are computed from the pod as it is and are empty when there is
nothing left to do. Each object the API server returns is recorded in the inventory at once, so
the next cycle sees the capacity this release took even before the watch echoes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from admission import constants as c
from admission.backends.base import Backend
from admission.controller import placement as pl
from admission.controller import translate as tr
from admission.controller.api import ApiError, ClusterApi, Conflict, NotFound
from admission.controller.snapshot import GangInfo
from admission.controller.translate import Obj
from solver.plan import GangPlacement
from solver.types import GpuShare

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReleaseResult:
    gang: str
    wrote: int = 0  # pods whose placement this call wrote
    opened: int = 0  # pods whose gate this call removed
    complete: bool = False  # every pod of the gang is past Berth's gate
    error: str | None = None
    released_pods: tuple[Obj, ...] = ()


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Releaser:
    def __init__(self, *, api: ClusterApi, backend: Backend, record: Callable[[Obj], object],
                 clock: Callable[[], datetime], queues: Mapping[str, str]) -> None:
        self.api = api
        self.backend = backend
        self.record = record  # feeds each returned object into the inventory
        self.clock = clock
        self.queues = queues

    # ------------------------------------------------------------------ helpers
    def _patch(self, pod: Obj, make: Callable[[Obj], list[pl.Op]]) -> tuple[Obj, bool]:
        """Apply the ops ``make`` computes from the pod; on a conflict read the pod again and
        retry once. Returns the pod as stored and whether anything changed."""
        for attempt in range(2):
            ops = make(pod)
            if not ops:
                return pod, False
            touches_spec = any(not op["path"].startswith("/metadata/") for op in ops)
            problems = pl.tightening_errors(pod, pl.apply_ops(pod, ops)) if touches_spec else []
            if problems:  # a bug in this module, never the user's: refuse to send it
                raise ApiError(0, f"refusing a patch KEP-3838 forbids: {'; '.join(problems)}")
            m = tr.meta(pod)
            try:
                new = self.api.patch_pod(m["namespace"], m["name"], ops)
            except Conflict:
                if attempt:
                    raise
                fresh = self.api.get_pod(m["namespace"], m["name"])
                if fresh is None or tr.meta(fresh).get("uid") != m.get("uid"):
                    raise NotFound(404, f"pod {tr.pod_key(pod)} is gone") from None
                self.record(fresh)
                pod = fresh
                continue
            self.record(new)
            return new, True
        raise AssertionError("unreachable")

    def write_placement(self, pod: Obj, node: str, shares: tuple[GpuShare, ...], plan: str,
                        info: GangInfo) -> tuple[Obj, bool]:
        queue = self.queues.get(info.tenant)
        labels, extra = self.backend.pod_metadata(info, queue)

        def make(current: Obj) -> list[pl.Op]:
            want = tr.assignment_annotations(node, shares, plan, rfc3339(self.clock()))
            ann = tr.annotations_of(current)
            if all(ann.get(k) == v for k, v in want.items() if k != c.ANNOTATION_ASSIGNED_AT):
                want.pop(c.ANNOTATION_ASSIGNED_AT)  # same plan already written: keep its time
            return pl.placement_ops(current, annotations_={**extra, **want}, labels_=labels)

        return self._patch(pod, make)

    def open_gate(self, pod: Obj, node: str) -> tuple[Obj, bool]:
        return self._patch(pod, lambda current: pl.release_ops(current, node))

    # ------------------------------------------------------------------ the protocol
    def release(self, info: GangInfo, placement: GangPlacement, plan: str) -> ReleaseResult:
        """Steps 1-3 for a gang the solver admitted."""
        result = ReleaseResult(gang=info.key)
        pods = {tr.pod_key(p): p for p in info.gated}
        try:
            self.backend.prepare(self.api, info, self.queues.get(info.tenant))
        except ApiError as exc:
            result.error = f"backend {self.backend.name}: {exc}"
            return result
        for pod in info.gated:
            problem = self.backend.problem(pod)
            if problem:
                log.warning("pod %s: %s", tr.pod_key(pod), problem)
        written: list[tuple[Obj, str]] = []
        for pp in placement.pods:
            target = pods.get(pp.pod)
            if target is None:
                result.error = f"plan names pod {pp.pod} the gang does not hold"
                return result
            try:
                new, changed = self.write_placement(target, pp.node, pp.gpus, plan, info)
            except ApiError as exc:
                result.error = f"writing placement on {pp.pod}: {exc}"
                return result  # no gate touched: the gang stays pending
            result.wrote += changed
            written.append((new, pp.node))
        if len(written) != len(info.gated) or any(tr.plan_id(p) != plan for p, _ in written):
            result.error = "not every pod of the gang carries the plan; gates left closed"
            return result
        return self._open_all(result, written)

    def finish(self, info: GangInfo) -> ReleaseResult:
        """Complete a release that was under way (every pod carries the same plan)."""
        result = ReleaseResult(gang=info.key)
        todo = []
        for pod in info.gated:
            assigned = tr.assigned_shares(pod)
            if assigned is None:
                result.error = f"pod {tr.pod_key(pod)} lost its assignment"
                return result
            todo.append((pod, assigned[0]))
        return self._open_all(result, todo)

    def _open_all(self, result: ReleaseResult, todo: list[tuple[Obj, str]]) -> ReleaseResult:
        released: list[Obj] = []
        for pod, node in todo:
            try:
                new, changed = self.open_gate(pod, node)
            except ApiError as exc:
                # The rest of the gang keeps its plan; the next cycle finishes it.
                result.error = f"opening the gate of {tr.pod_key(pod)}: {exc}"
                result.released_pods = tuple(released)
                return result
            result.opened += changed
            if changed:
                released.append(new)
        result.complete = True
        result.released_pods = tuple(released)
        return result
