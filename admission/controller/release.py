"""The release protocol: write every pod's placement, then open the gates.

1. The backend prepares what its queue needs (a Volcano PodGroup).
2. Each pod of the gang gets its assignment annotations (node, GPUs, shares, plan id) and the
   backend's labels. A failure here stops the gang: no gate was touched, the gang stays
   pending and the next cycle plans it again (the annotations are simply overwritten).
3. Only when every pod carries the plan id does each pod get one guarded update that pins it to
   its node and removes Berth's gate. A crash half-way leaves the rest of the gang gated *with*
   the plan on every pod; the next cycle (of this or another replica) sees that the gang is
   "finishing" and completes it without solving again. A gang of one pod gets steps 2 and 3
   in one patch, which the API server applies whole or not at all.

Every step is idempotent: patches are computed from the pod as it is and are empty when there is
nothing left to do. Each object the API server returns is recorded in the inventory at once, so
the next cycle sees the capacity this release took even before the watch echoes it.

Writes are round trips that mostly wait, so they overlap (:mod:`writers`): the admitted gangs
are released side by side, and within a gang every placement is sent at once, then, once all
have answered, every gate at once. The order above holds per gang; a crash anywhere stops the
whole batch from starting anything more, exactly as if the process had died.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from admission import constants as c
from admission import jsonpatch
from admission.backends.base import Backend
from admission.controller import placement as pl
from admission.controller import runtimes
from admission.controller import translate as tr
from admission.controller.api import ApiError, ClusterApi, Conflict, NotFound
from admission.controller.snapshot import GangInfo
from admission.controller.translate import Obj
from admission.controller.writers import Writers
from admission.jsonpatch import PatchOp
from solver.plan import GangPlacement, PodPlacement
from solver.types import GpuShare

log = logging.getLogger(__name__)

#: Annotations of the release that say when it was made: a retry of the same plan keeps them.
_TIMES = (c.ANNOTATION_ASSIGNED_AT, c.ANNOTATION_EXPECTED_END)

G = TypeVar("G")
T = TypeVar("T")


def _caught(fn: Callable[[T], tuple[Obj, bool]]) -> Callable[[T], tuple[Obj, bool] | ApiError]:
    """``fn`` with an API error returned instead of raised: one failed write of a step is an
    outcome of that step (the gang stays as it is), not a crash of the batch."""
    def call(item: T) -> tuple[Obj, bool] | ApiError:
        try:
            return fn(item)
        except ApiError as exc:
            return exc
    return call


@dataclass(slots=True)
class ReleaseResult:
    gang: str
    wrote: int = 0  # pods whose placement this call wrote
    opened: int = 0  # pods whose gate this call removed
    complete: bool = False  # every pod of the gang is past Berth's gate
    error: str | None = None
    released_pods: tuple[Obj, ...] = ()
    done_at: datetime | None = None  # when its last gate was answered


class Releaser:
    def __init__(self, *, api: ClusterApi, backend: Backend, record: Callable[[Obj], object],
                 clock: Callable[[], datetime], queues: Mapping[str, str],
                 forget: Callable[[Obj], object], writers: int = 1) -> None:
        self.api = api
        self.backend = backend
        self.record = record  # feeds each returned object into the inventory
        self.forget = forget  # drops a pod the API server says is gone from the inventory
        self.clock = clock
        self.queues = queues
        # Gangs side by side, and each gang's pods side by side: the gang threads mostly wait
        # on their pods' writes, so at most ``writers`` pod writes are in flight per pool.
        self._gangs = Writers(writers, "berth-release-gang")
        self._pods = Writers(writers, "berth-release-pod")

    # ------------------------------------------------------------------ helpers
    def _patch(self, pod: Obj, make: Callable[[Obj], list[PatchOp]]) -> tuple[Obj, bool]:
        """Apply the ops ``make`` computes from the pod; on a conflict read the pod again and
        retry once. Returns the pod as stored and whether anything changed."""
        for attempt in range(2):
            ops = make(pod)
            if not ops:
                return pod, False
            touches_spec = any(not op["path"].startswith("/metadata/") for op in ops)
            problems = pl.tightening_errors(pod, jsonpatch.apply(pod, ops)) if touches_spec else []
            if problems:  # a bug in this module, never the user's: refuse to send it
                raise ApiError(0, f"refusing a patch KEP-3838 forbids: {'; '.join(problems)}")
            m = tr.meta(pod)
            try:
                new = self.api.patch_pod(m["namespace"], m["name"], ops)
            except NotFound:
                self.forget(pod)  # missed or not yet seen DELETED: no ghost for the next cycle
                raise
            except Conflict:
                if attempt:
                    raise
                fresh = self.api.get_pod(m["namespace"], m["name"])
                if fresh is None or tr.meta(fresh).get("uid") != m.get("uid"):
                    self.forget(pod)
                    raise NotFound(404, f"pod {tr.pod_key(pod)} is gone") from None
                self.record(fresh)
                pod = fresh
                continue
            self.record(new)
            return new, True
        raise AssertionError("unreachable")

    def _placement_ops(self, node: str, shares: tuple[GpuShare, ...], plan: str,
                       info: GangInfo) -> Callable[[Obj], list[PatchOp]]:
        queue = self.queues.get(info.tenant)
        labels, extra = self.backend.pod_metadata(info, queue)

        def make(current: Obj) -> list[PatchOp]:
            now = self.clock()
            # What Berth expects of the pod rides on this write (no write of its own): its
            # expected end and where that comes from, for users to read (runtimes.py).
            expected = info.expected.get(tr.pod_key(current), runtimes.UNKNOWN)
            want = {**tr.assignment_annotations(node, shares, plan, tr.rfc3339(now)),
                    **runtimes.release_annotations(expected, now)}
            ann = tr.annotations_of(current)
            if all(ann.get(k) == v for k, v in want.items() if k not in _TIMES):
                for k in _TIMES:  # same plan already written: keep its times
                    want.pop(k, None)
            # an end an earlier plan wrote goes when this one knows none
            drop = (c.ANNOTATION_EXPECTED_END,) if expected.remaining_s is None else ()
            return pl.placement_ops(current, annotations_={**extra, **want}, labels_=labels,
                                    drop=drop)

        return make

    def write_placement(self, pod: Obj, node: str, shares: tuple[GpuShare, ...], plan: str,
                        info: GangInfo) -> tuple[Obj, bool]:
        return self._patch(pod, self._placement_ops(node, shares, plan, info))

    def place_and_open(self, pod: Obj, node: str, shares: tuple[GpuShare, ...], plan: str,
                       info: GangInfo) -> tuple[Obj, bool]:
        """A gang of one pod: its placement and its gate in one update, which the API server
        applies whole or not at all, so the pod never leaves the gate without its plan. Half
        the writes of steps 2 and 3 for the most common gang there is."""
        placement = self._placement_ops(node, shares, plan, info)
        return self._patch(pod, lambda current: placement(current)
                           + pl.release_ops(current, node))

    def open_gate(self, pod: Obj, node: str) -> tuple[Obj, bool]:
        return self._patch(pod, lambda current: pl.release_ops(current, node))

    # ------------------------------------------------------------------ the protocol
    def release(self, info: GangInfo, placement: GangPlacement, plan: str) -> ReleaseResult:
        """Steps 1-3 for a gang the solver admitted. Used by the tests only; the cycle releases
        its gangs side by side with :meth:`release_all`."""
        return self._release(info, placement, plan, threading.Event())

    def release_all(self, jobs: Sequence[tuple[GangInfo, GangPlacement]], plan: str,
                    may_write: Callable[[], bool]) -> list[ReleaseResult]:
        """:meth:`release` for each admitted gang, gangs side by side. ``may_write`` is asked
        before each gang (a replica that lost its Lease stops); the results of the gangs it
        started, in the order given."""
        return self._each_gang(lambda job, stop: self._release(job[0], job[1], plan, stop),
                               jobs, may_write)

    def finish_all(self, infos: Sequence[GangInfo],
                   may_write: Callable[[], bool]) -> list[ReleaseResult]:
        """Complete each release that was under way (every pod of the gang carries the same
        plan), gangs side by side."""
        return self._each_gang(self._finish, infos, may_write)

    def close(self) -> None:
        self._gangs.close()
        self._pods.close()

    def _each_gang(self, fn: Callable[[G, threading.Event], ReleaseResult], items: Sequence[G],
                   may_write: Callable[[], bool]) -> list[ReleaseResult]:
        stop = threading.Event()  # set by a crash anywhere in this batch: nothing more starts

        def one(item: G) -> ReleaseResult | None:
            return fn(item, stop) if may_write() else None

        return [r for r in self._gangs.each(one, items, stop) if r is not None]

    def _release(self, info: GangInfo, placement: GangPlacement, plan: str,
                 stop: threading.Event) -> ReleaseResult:
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
        for pp in placement.pods:
            if pp.pod not in pods:
                result.error = f"plan names pod {pp.pod} the gang does not hold"
                return result
        if len(placement.pods) == 1 and len(info.gated) == 1:
            return self._release_one(result, info, placement.pods[0], pods[placement.pods[0].pod],
                                     plan, stop)

        # Step 2, every pod of the gang at once; step 3 starts only when all have answered.
        outcomes = self._pods.each(_caught(lambda pp: self.write_placement(
            pods[pp.pod], pp.node, pp.gpus, plan, info)), placement.pods, stop)
        written: list[tuple[Obj, str]] = []
        for pp, out in zip(placement.pods, outcomes, strict=True):
            if isinstance(out, ApiError):
                result.error = f"writing placement on {pp.pod}: {out}"
                return result  # no gate touched: the gang stays pending
            result.wrote += out[1]
            written.append((out[0], pp.node))
        if len(written) != len(info.gated) or any(tr.plan_id(p) != plan for p, _ in written):
            result.error = "not every pod of the gang carries the plan; gates left closed"
            return result
        return self._open_all(result, written, stop)

    def _release_one(self, result: ReleaseResult, info: GangInfo, pp: PodPlacement, pod: Obj,
                     plan: str, stop: threading.Event) -> ReleaseResult:
        out = self._pods.each(_caught(lambda one: self.place_and_open(
            pod, one.node, one.gpus, plan, info)), [pp], stop)[0]
        if isinstance(out, ApiError):
            result.error = f"releasing {pp.pod}: {out}"
            return result  # nothing applied: the gang stays pending
        new, changed = out
        if tr.has_berth_gate(new) or tr.plan_id(new) != plan:
            result.error = "the pod does not carry the plan; gate left closed"
            return result
        result.wrote = result.opened = int(changed)
        result.released_pods = (new,) if changed else ()
        result.complete = True
        result.done_at = self.clock()
        return result

    def _finish(self, info: GangInfo, stop: threading.Event) -> ReleaseResult:
        result = ReleaseResult(gang=info.key)
        todo = []
        for pod in info.gated:
            assigned = tr.assigned_shares(pod)
            if assigned is None:
                result.error = f"pod {tr.pod_key(pod)} lost its assignment"
                return result
            todo.append((pod, assigned[0]))
        return self._open_all(result, todo, stop)

    def _open_all(self, result: ReleaseResult, todo: list[tuple[Obj, str]],
                  stop: threading.Event) -> ReleaseResult:
        opened = self._pods.each(_caught(lambda item: self.open_gate(*item)), todo, stop)
        released: list[Obj] = []
        for (pod, _), out in zip(todo, opened, strict=True):
            if isinstance(out, ApiError):
                # The rest of the gang keeps its plan; the next cycle finishes it.
                result.error = result.error or f"opening the gate of {tr.pod_key(pod)}: {out}"
                continue
            result.opened += out[1]
            if out[1]:
                released.append(out[0])
        result.complete = result.error is None
        result.released_pods = tuple(released)
        result.done_at = self.clock()
        return result
