"""The controller's picture of the cluster: the nodes and the pods that matter, as API JSON.

Fed by the watches (and by the release itself, which records each object the API server
returns so the next cycle sees its own writes before the watch echoes them). Thread-safe: the
watch threads write, the cycle reads a consistent copy through :meth:`Inventory.view`.

A pod matters when it holds or may soon hold resources (bound to a node, or released by Berth
and not yet bound) or waits behind Berth's gate. Finished and deleted pods are dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from admission import constants as c
from admission.controller.translate import Obj, has_berth_gate, is_finished, meta, pod_key, spec


@dataclass(frozen=True, slots=True)
class View:
    """A consistent copy taken under the lock: the cycle works on this, never on live maps."""

    nodes: Mapping[str, Obj]
    pods: Mapping[str, Obj]
    version: int
    # DRA objects by kind (DRA_KINDS), each by namespace/name ("/name" when cluster-scoped)
    dra: Mapping[str, Mapping[str, Obj]] = field(default_factory=dict)
    # Jobs with a deadline by namespace/name, each cut down by :func:`job_summary`
    jobs: Mapping[str, Obj] = field(default_factory=dict)

    def dra_of(self, kind: str) -> Mapping[str, Obj]:
        return self.dra.get(kind) or {}


def _rv(obj: Obj) -> int:
    try:
        return int(meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


#: How many dropped pods the inventory remembers (see :attr:`Inventory._dropped`).
DROPPED_REMEMBERED = 65536
#: The version a deleted pod is remembered at: no later copy of it may bring it back.
_FOREVER = 1 << 62


class Inventory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._dra: dict[str, dict[str, Obj]] = {}
        self._jobs: dict[str, Obj] = {}
        self._version = 0  # bumped on every change, so the fast path can tell news from noise
        # keys of the pods Berth released that no scheduler has bound yet (released_unbound)
        self._unbound: set[str] = set()
        # uid -> the resourceVersion at which a pod left the inventory (_FOREVER once deleted,
        # finished or terminating, states no pod comes back from). The release records what
        # the API server answered, and that answer may arrive after the watch's DELETED: without
        # this, the older copy would bring a deleted pod back as a ghost that the cycle keeps
        # admitting (and holding capacity for) until the next relist.
        self._dropped: OrderedDict[str, int] = OrderedDict()

    # ---------------------------------------------------------------- pods
    @staticmethod
    def pod_matters(pod: Obj) -> bool:
        if is_finished(pod) or meta(pod).get("deletionTimestamp"):
            return False
        return bool(spec(pod).get("nodeName")) or has_berth_gate(pod) or _berth_released(pod)

    def apply_pod(self, event: str, pod: Obj) -> bool:
        """Record a watch event (ADDED, MODIFIED, DELETED) or an object the API returned.
        Returns True when the inventory changed."""
        pod = slim(pod)
        key = pod_key(pod)
        uid = str(meta(pod).get("uid") or "")
        with self._lock:
            old = self._pods.get(key)
            if event == "DELETED" or not self.pod_matters(pod):
                terminal = event == "DELETED" or is_finished(pod) \
                    or bool(meta(pod).get("deletionTimestamp"))
                self._drop_mark(uid, _FOREVER if terminal else _rv(pod))
                if old is None:
                    return False
                if event == "DELETED" and meta(old).get("uid") != meta(pod).get("uid"):
                    return False
                del self._pods[key]
                self._unbound.discard(key)
            else:
                # Ignore stale copies: of a pod already dropped at a later version (or for good),
                # and echoes of an object the release already recorded.
                if uid and self._dropped.get(uid, -1) >= _rv(pod):
                    return False
                if old is not None and meta(old).get("uid") == meta(pod).get("uid") \
                        and _rv(old) > _rv(pod):
                    return False
                self._pods[key] = pod
                if _waits_for_scheduler(pod):
                    self._unbound.add(key)
                else:
                    self._unbound.discard(key)
            self._version += 1
            return True

    def forget_pod(self, pod: Obj) -> bool:
        """The API server said this pod is gone (404): drop it as a DELETED event would."""
        return self.apply_pod("DELETED", pod)

    def _drop_mark(self, uid: str, rv: int) -> None:
        if not uid:
            return
        if self._dropped.get(uid, -1) < rv:
            self._dropped[uid] = rv
            self._dropped.move_to_end(uid)
            while len(self._dropped) > DROPPED_REMEMBERED:
                self._dropped.popitem(last=False)

    def replace_pods(self, pods: Sequence[Obj]) -> None:
        """A full relist (start-up, resync, or a watch that expired)."""
        fresh = {pod_key(p): slim(p) for p in pods if self.pod_matters(p)}
        with self._lock:
            # What the list holds exists now: only a pod the list lacks stays dropped.
            for p in fresh.values():
                self._dropped.pop(str(meta(p).get("uid") or ""), None)
            self._pods = fresh
            self._unbound = {k for k, p in fresh.items() if _waits_for_scheduler(p)}
            self._version += 1

    def released_unbound(self) -> int:
        """How many pods Berth released that no scheduler has bound yet: the queue its
        scheduler still has to work through (the writes' pacing keeps it from running dry)."""
        return len(self._unbound)

    # ---------------------------------------------------------------- nodes
    def apply_node(self, event: str, node: Obj) -> bool:
        name = meta(node).get("name", "")
        with self._lock:
            if event == "DELETED":
                if self._nodes.pop(name, None) is None:
                    return False
            else:
                old = self._nodes.get(name)
                if old is not None and _rv(old) > _rv(node):
                    return False
                self._nodes[name] = node
            self._version += 1
            return True

    def replace_nodes(self, nodes: Sequence[Obj]) -> None:
        fresh = {meta(n).get("name", ""): n for n in nodes}
        with self._lock:
            self._nodes = fresh
            self._version += 1

    # ---------------------------------------------------------------- DRA objects
    def apply_dra(self, kind: str, event: str, obj: Obj) -> bool:
        """A watch event of a ResourceSlice, ResourceClaim or ResourceClaimTemplate."""
        obj = slim(obj)
        key = object_key(obj)
        with self._lock:
            objects = self._dra.setdefault(kind, {})
            if event == "DELETED":
                if objects.pop(key, None) is None:
                    return False
            else:
                old = objects.get(key)
                if old is not None and meta(old).get("uid") == meta(obj).get("uid") \
                        and _rv(old) > _rv(obj):
                    return False
                objects[key] = obj
            self._version += 1
            return True

    def replace_dra(self, kind: str, objects: Sequence[Obj]) -> None:
        fresh = {object_key(o): slim(o) for o in objects}
        with self._lock:
            self._dra[kind] = fresh
            self._version += 1

    # ---------------------------------------------------------------- Jobs
    # Only Jobs with a deadline are kept, and of each only what runtimes.py reads (a cluster
    # may hold many thousands of Jobs; a watch of them costs their summaries, not their pod
    # templates). A watch rather than a GET per pod: the cycle never waits on the API server,
    # and a Job's deadline changes (it may be raised or removed) reach the next window.
    def apply_job(self, event: str, job: Obj) -> bool:
        key = object_key(job)
        summary = None if event == "DELETED" else job_summary(job)
        with self._lock:
            old = self._jobs.get(key)
            if summary is None:
                if old is None or (event == "DELETED"
                                   and meta(old).get("uid") != meta(job).get("uid")):
                    return False
                del self._jobs[key]
            else:
                if old is not None and meta(old).get("uid") == meta(job).get("uid") \
                        and _rv(old) > _rv(job):
                    return False
                if old == summary:
                    return False
                self._jobs[key] = summary
            self._version += 1
            return True

    def replace_jobs(self, jobs: Sequence[Obj]) -> None:
        fresh = {object_key(j): s for j in jobs if (s := job_summary(j)) is not None}
        with self._lock:
            self._jobs = fresh
            self._version += 1

    # ---------------------------------------------------------------- reading
    def view(self) -> View:
        with self._lock:
            return View(dict(self._nodes), dict(self._pods), self._version,
                        {k: dict(v) for k, v in self._dra.items()}, dict(self._jobs))

    def pod(self, key: str) -> Obj | None:
        with self._lock:
            return self._pods.get(key)

    @property
    def version(self) -> int:
        return self._version

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {"nodes": len(self._nodes), "pods": len(self._pods), "jobs": len(self._jobs),
                    "released_unbound": len(self._unbound)}


def object_key(obj: Obj) -> str:
    """``namespace/name`` (``/name`` when cluster-scoped): how DRA objects and Jobs are kept."""
    m = meta(obj)
    return f"{m.get('namespace') or ''}/{m.get('name') or ''}"


def job_summary(job: Obj) -> Obj | None:
    """What the controller keeps of a Job: its identity, deadline and start; None for a Job
    without a deadline (nothing to learn from it)."""
    deadline = spec(job).get("activeDeadlineSeconds")
    if deadline is None:
        return None
    m = meta(job)
    return {"metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion")
                         if k in m},
            "spec": {"activeDeadlineSeconds": deadline},
            "status": {"startTime": (job.get("status") or {}).get("startTime")}}


def slim(obj: Obj) -> Obj:
    """The object without ``managedFields``, often half its size and never read here."""
    m = obj.get("metadata")
    if not m or "managedFields" not in m:
        return obj
    return {**obj, "metadata": {k: v for k, v in m.items() if k != "managedFields"}}


def _berth_released(pod: Obj) -> bool:
    return bool((meta(pod).get("annotations") or {}).get(c.ANNOTATION_ASSIGNED_NODE))


def _waits_for_scheduler(pod: Obj) -> bool:
    """Released by Berth (its placement written, its gate gone) and not yet bound."""
    return _berth_released(pod) and not has_berth_gate(pod) and not spec(pod).get("nodeName")
