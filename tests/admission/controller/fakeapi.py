"""An in-memory API server for the controller's unit tests.

It stores pods, nodes, events, leases and custom objects as JSON, bumps resourceVersion on each
write, applies JSON patches with :func:`admission.jsonpatch.apply` (answering a patch that does
not apply, a failed ``test`` above all, with the bare 422 the API server sends) and enforces
the API server's update rules for pods that matter here: KEP-3838 (a gated pod's scheduling
directives may only be tightened; gates never added) and immutability of everything else in the
spec. Failure injection: ``fail_after`` makes the n-th following pod patch raise, to simulate a
crash between the steps of a release.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence

from admission import jsonpatch
from admission.controller.api import ApiError, Conflict, Json, NotFound
from admission.jsonpatch import PatchOp


class Crash(Exception):
    """Raised by an injected failure: the controller 'dies' here."""


def json_patch(doc: Json, ops: Sequence[PatchOp]) -> Json:
    """``doc`` after ``ops``, or the API server's answer to a patch that does not apply."""
    try:
        return jsonpatch.apply(doc, ops)
    except jsonpatch.PatchError as err:
        raise Conflict(422, f"the server rejected our request due to an error in our "
                            f"request: {err}") from None


def _terms(pod: Json) -> list[Json] | None:
    req = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    return None if req is None else req.get("nodeSelectorTerms", [])


def validate_pod_update(old: Json, new: Json) -> None:
    """The API server's rules for a pod update, as far as the controller can trip them."""
    o, n = old["spec"], new["spec"]
    gated = bool(o.get("schedulingGates"))
    old_gates = [g["name"] for g in o.get("schedulingGates") or []]
    for g in n.get("schedulingGates") or []:
        if g["name"] not in old_gates:
            raise ApiError(422, "spec.schedulingGates: Forbidden: only deletion is allowed")
    mutable = {"schedulingGates", "nodeSelector", "affinity", "tolerations"} if gated else set()
    for key in set(o) | set(n):
        if key not in mutable and key != "schedulingGates" and o.get(key) != n.get(key):
            raise ApiError(422, f"spec: Forbidden: pod updates may not change fields other than "
                                f"... ({key})")
    if not gated:
        return
    for k, v in (o.get("nodeSelector") or {}).items():
        if (n.get("nodeSelector") or {}).get(k) != v:
            raise ApiError(422, "spec.nodeSelector: Invalid value: only additions")
    ot, nt = _terms(old), _terms(new)
    if ot is not None:
        if nt is None or len(nt) != len(ot):
            raise ApiError(422, "spec.affinity...nodeSelectorTerms: terms may not change")
        for a, b in zip(ot, nt, strict=True):
            for part in ("matchExpressions", "matchFields"):
                before, after = a.get(part) or [], b.get(part) or []
                if after[: len(before)] != before:
                    raise ApiError(422, f"spec.affinity...{part}: only additions")
    ol, nl = o.get("tolerations") or [], n.get("tolerations") or []
    if nl[: len(ol)] != ol:
        raise ApiError(422, "spec.tolerations: only additions")


class FakeApi:
    def __init__(self) -> None:
        self.pods: dict[str, Json] = {}
        self.nodes: dict[str, Json] = {}
        self.events: list[Json] = []
        self.leases: dict[str, Json] = {}
        self.config_maps: dict[str, Json] = {}
        self.custom: dict[tuple[str, str, str], Json] = {}
        self.dra: dict[str, dict[str, Json]] = {}  # DRA kind -> namespace/name -> object
        self.jobs: dict[str, Json] = {}  # namespace/name -> batch/v1 Job
        self.patches: list[tuple[str, Sequence[PatchOp]]] = []
        self._rv = itertools.count(1000)
        self.fail_after: int | None = None  # the n-th next pod patch crashes
        self.blocked: set[str] = set()  # pods a PodDisruptionBudget keeps from eviction
        self.evictions: list[str] = []  # pods evicted, in order
        # list_custom: the versions each group is served in (a group not named: every
        # version), an ApiError every list raises instead (RBAC), and the lists asked for
        self.custom_versions: dict[str, tuple[str, ...]] = {}
        self.custom_refusal: ApiError | None = None
        self.custom_lists: list[tuple[str, str, str, str]] = []

    # -------------------------------------------------------------- helpers for tests
    def _bump(self, obj: Json) -> Json:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        return obj

    def _store(self, store: dict[str, Json], obj: Json, uid_prefix: str) -> Json:
        """A namespaced object as the API server stores it: a copy, defaulted and versioned."""
        obj = copy.deepcopy(obj)
        m = obj["metadata"]
        m.setdefault("namespace", "default")
        m.setdefault("uid", f"{uid_prefix}{m['namespace']}-{m['name']}")
        store[f"{m['namespace']}/{m['name']}"] = self._bump(obj)
        return copy.deepcopy(obj)

    def add_pod(self, pod: Json) -> Json:
        return self._store(self.pods, pod, "uid-")

    def add_node(self, node: Json) -> Json:
        node = copy.deepcopy(node)
        self.nodes[node["metadata"]["name"]] = self._bump(node)
        return copy.deepcopy(node)

    def bind(self, key: str, node: str) -> None:
        """What the scheduler does once the gates are gone."""
        pod = self.pods[key]
        assert not pod["spec"].get("schedulingGates"), f"{key} is still gated"
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        self._bump(pod)

    # -------------------------------------------------------------- the ClusterApi protocol
    def list_pods(self) -> tuple[list[Json], str]:
        return [copy.deepcopy(p) for p in self.pods.values()], str(next(self._rv))

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return iter(())

    def list_nodes(self) -> tuple[list[Json], str]:
        return [copy.deepcopy(n) for n in self.nodes.values()], str(next(self._rv))

    def watch_nodes(self, resource_version: str,
                    timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return iter(())

    def add_job(self, job: Json) -> Json:
        """A Job as the API server stores it (also how a test changes one: any field of a
        Job's spec but its template is accepted, as the API server does for the deadline)."""
        return self._store(self.jobs, job, "uid-job-")

    def list_jobs(self) -> tuple[list[Json], str]:
        return [copy.deepcopy(j) for j in self.jobs.values()], str(next(self._rv))

    def watch_jobs(self, resource_version: str,
                   timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return iter(())

    def list_dra(self, kind: str) -> tuple[list[Json], str]:
        return [copy.deepcopy(o) for o in self.dra.get(kind, {}).values()], str(next(self._rv))

    def watch_dra(self, kind: str, resource_version: str,
                  timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return iter(())

    def add_dra(self, kind: str, obj: Json) -> Json:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"uid-{meta['name']}")
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        self.dra.setdefault(kind, {})[key] = obj
        return obj

    def get_pod(self, namespace: str, name: str) -> Json | None:
        pod = self.pods.get(f"{namespace}/{name}")
        return copy.deepcopy(pod) if pod else None

    def patch_pod(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> Json:
        key = f"{namespace}/{name}"
        if self.fail_after is not None:
            if self.fail_after == 0:
                self.fail_after = None
                raise Crash(f"injected crash before patching {key}")
            self.fail_after -= 1
        old = self.pods.get(key)
        if old is None:
            raise NotFound(404, f'pods "{name}" not found')
        new = json_patch(old, ops)
        validate_pod_update(old, new)
        self.patches.append((key, ops))
        self.pods[key] = self._bump(new)
        return copy.deepcopy(new)

    def set_pod_condition(self, namespace: str, name: str, condition: Json) -> Json:
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            raise NotFound(404, f'pods "{name}" not found')
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        conds[:] = [c for c in conds if c["type"] != condition["type"]] + [condition]
        return copy.deepcopy(self._bump(pod))

    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        """The Eviction API: a pod in ``blocked`` (its PDB allows no disruption) is refused
        with 429; an evicted pod gets the API server's own DisruptionTarget condition and a
        deletion timestamp (its owner recreates it; the test removes it when it wants)."""
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None:
            raise NotFound(404, f'pods "{name}" not found')
        if key in self.blocked:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption "
                           "budget.")
        if dry_run:
            return
        self.evictions.append(key)
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        conds[:] = [c for c in conds if c["type"] != "DisruptionTarget"] + [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting"}]
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self._bump(pod)

    def create_event(self, namespace: str, event: Json) -> None:
        self.events.append(copy.deepcopy(event))

    def get_lease(self, namespace: str, name: str) -> Json | None:
        return self._get(self.leases, namespace, name)

    def create_lease(self, namespace: str, lease: Json) -> Json:
        return self._create(self.leases, namespace, lease)

    def replace_lease(self, namespace: str, name: str, lease: Json) -> Json:
        # a lease's update always carries the version it read
        return self._replace(self.leases, namespace, name, lease, "lease",
                             version_optional=False)

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        return self._get(self.config_maps, namespace, name)

    def create_config_map(self, namespace: str, body: Json) -> Json:
        return self._create(self.config_maps, namespace, body)

    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json:
        return self._replace(self.config_maps, namespace, name, body, "configmap",
                             version_optional=True)

    # the API server's get/create/replace of a namespaced object, kept by namespace/name
    @staticmethod
    def _get(store: dict[str, Json], namespace: str, name: str) -> Json | None:
        obj = store.get(f"{namespace}/{name}")
        return copy.deepcopy(obj) if obj else None

    def _create(self, store: dict[str, Json], namespace: str, body: Json) -> Json:
        key = f"{namespace}/{body['metadata']['name']}"
        if key in store:
            raise Conflict(409, "already exists")
        store[key] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(store[key])

    def _replace(self, store: dict[str, Json], namespace: str, name: str, body: Json,
                 kind: str, *, version_optional: bool) -> Json:
        key = f"{namespace}/{name}"
        current = store.get(key)
        if current is None:
            raise NotFound(404, f"{kind} not found")
        rv = body["metadata"].get("resourceVersion")
        if not (rv is None and version_optional) and rv != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        store[key] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(store[key])

    def list_custom(self, group: str, version: str, plural: str,
                    namespace: str) -> list[Json]:
        self.custom_lists.append((group, version, plural, namespace))
        if self.custom_refusal is not None:
            raise self.custom_refusal
        if group in self.custom_versions and version not in self.custom_versions[group]:
            raise NotFound(404, f"the server could not find {plural}.{group}/{version}")
        return [copy.deepcopy(o) for (kind, ns, _), o in sorted(self.custom.items())
                if kind == plural and ns == namespace]

    def apply_custom(self, group: str, version: str, plural: str, namespace: str,
                     body: Json) -> Json:
        key = (plural, namespace, body["metadata"]["name"])
        self.custom[key] = copy.deepcopy(body)
        return copy.deepcopy(body)
