"""Pure translation of API objects (pod and node JSON as the API server returns them) into the
solver's problem types.

Pure on purpose: the watch code hands plain dicts here, the unit tests hand recorded JSON, and
nothing in this module talks to a cluster. Anything a pod or node already says about where a pod
may go (node selector, required node affinity, tolerations against taints, cordon, readiness) is
carried into the snapshot so that a released pod is always schedulable where Berth put it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from admission import constants as c
from admission.agent import schema as agent_schema
from admission.controller import keys, quantity

# The small readers, re-exported: the controller reads objects through this module.
from admission.objects import Obj as Obj
from admission.objects import annotations_of as annotations_of
from admission.objects import gate_names as gate_names
from admission.objects import labels as labels
from admission.objects import meta as meta
from admission.objects import spec as spec
from solver.types import (
    GPU,
    MILLI,
    GpuShare,
    Node,
    NodeSelectorRequirement,
    PodRequest,
    Running,
    Taint,
    Toleration,
    TopologyMode,
    TopologyRequirement,
)


class TranslationError(ValueError):
    """An object carries a value Berth cannot read; the message names the object and field."""


# --------------------------------------------------------------------------------------------
# Small readers (meta, spec, labels and annotations_of come from admission.objects)
# --------------------------------------------------------------------------------------------


def pod_key(pod: Obj) -> str:
    m = meta(pod)
    return f"{m.get('namespace', 'default')}/{m.get('name', '')}"


def has_berth_gate(pod: Obj) -> bool:
    return c.SCHEDULING_GATE in gate_names(pod)


def is_finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def rfc3339(t: datetime) -> str:
    """An API timestamp (RFC 3339, whole seconds, UTC) of an aware UTC datetime, as Berth
    writes them: "2026-11-29T18:00:00Z"."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(ts: object) -> datetime | None:
    """An API timestamp (RFC 3339 such as "2026-11-29T18:00:00Z", a MicroTime such as
    "2026-11-29T18:00:00.000001Z", or a datetime) as an aware datetime; None when absent or
    unreadable. The one reader of every time the controller gets from the API server."""
    if not ts:
        return None
    if isinstance(ts, datetime):
        return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None


def active_deadline_s(pod: Obj) -> float | None:
    """The pod's ``spec.activeDeadlineSeconds`` (the kubelet ends the pod that long after it
    started, and the API server lets it only be set or lowered afterwards: a bound a tenant
    cannot stretch), or None when it has none (or not a positive whole number)."""
    raw = spec(pod).get("activeDeadlineSeconds")
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_DEADLINE_S:
        return float(raw)
    return None


def remaining_s(pod: Obj, now: datetime) -> float | None:
    """Seconds until the pod's deadline ends it at the latest (its whole deadline when it has
    not started); None without a deadline."""
    deadline = active_deadline_s(pod)
    if deadline is None:
        return None
    started = parse_time((pod.get("status") or {}).get("startTime"))
    if started is None:
        return deadline
    return min(deadline, max(0.0, deadline - (now - started).total_seconds()))


#: The longest deadline read (ten years); a larger one is as good as none.
MAX_DEADLINE_S = 10 * 365 * 86_400


def created_at(obj: Obj) -> datetime | None:
    return parse_time(meta(obj).get("creationTimestamp"))


def pod_condition(pod: Obj, kind: str) -> Obj | None:
    """The pod's status condition of type ``kind``, if it has one."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def _int_annotation(pod: Obj, key: str, default: int) -> int:
    raw = annotations_of(pod).get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise TranslationError(
            f"pod {pod_key(pod)}: annotation {key}={raw!r} is not an integer"
        ) from None


def _read(path: str, fn: Any, value: Any, where: str) -> int:
    try:
        return int(fn(value))
    except quantity.QuantityError as exc:
        raise TranslationError(f"{where}: {path}: {exc}") from None


# --------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------


def _merged(container: Obj) -> Mapping[str, Any]:
    res = container.get("resources") or {}
    # The API server defaults requests to limits for a resource that only has a limit.
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def _container_requests(container: Obj, where: str) -> tuple[int, int]:
    merged = _merged(container)
    cpu = _read("cpu", quantity.milli, merged["cpu"], where) if "cpu" in merged else 0
    mem = _read("memory", quantity.mib, merged["memory"], where) if "memory" in merged else 0
    return cpu, mem


def _is_sidecar(container: Obj) -> bool:
    """An init container that keeps running beside the app containers (KEP-753)."""
    return container.get("restartPolicy") == "Always"


def effective(pod: Obj, read: Callable[[Obj], Sequence[int]], width: int) -> list[int]:
    """A pod's effective request of ``width`` quantities, each container's read by ``read``,
    by Kubernetes' rule (``resourcehelper.PodRequests``): the app containers plus every
    sidecar, or, if larger, the largest need during init, where each init container runs
    beside the sidecars started before it. Pod overhead is the caller's."""
    s = spec(pod)
    total = [0] * width
    for ctr in s.get("containers") or []:
        total = [a + b for a, b in zip(total, read(ctr), strict=True)]
    sidecars = [0] * width
    init_peak = [0] * width
    for ctr in s.get("initContainers") or []:
        own = read(ctr)
        if _is_sidecar(ctr):
            total = [a + b for a, b in zip(total, own, strict=True)]
            sidecars = [a + b for a, b in zip(sidecars, own, strict=True)]
            step = sidecars
        else:
            step = [a + b for a, b in zip(own, sidecars, strict=True)]
        init_peak = [max(a, b) for a, b in zip(init_peak, step, strict=True)]
    return [max(a, b) for a, b in zip(total, init_peak, strict=True)]


def pod_cpu_memory(pod: Obj) -> tuple[int, int]:
    """Effective CPU (milli) and memory (MiB) requests as the scheduler counts them
    (:func:`effective`), plus the pod overhead."""
    where = f"pod {pod_key(pod)}"
    cpu, mem = effective(pod, lambda ctr: _container_requests(ctr, where), 2)
    overhead = spec(pod).get("overhead") or {}
    if "cpu" in overhead:
        cpu += _read("overhead.cpu", quantity.milli, overhead["cpu"], where)
    if "memory" in overhead:
        mem += _read("overhead.memory", quantity.mib, overhead["memory"], where)
    return cpu, mem


def _is_extended(name: str) -> bool:
    """Extended resources (device plugins' ``vendor/name``), as opposed to cpu, memory,
    ephemeral-storage and hugepages."""
    return "/" in name


def pod_devices(pod: Obj) -> dict[str, int]:
    """Effective requests of every extended resource (``nvidia.com/gpu``, time-slicing slots,
    MIG profiles, ...) as the scheduler and the device plugin count them (:func:`effective`:
    sidecars add, init containers take the largest). Extended resources have limit ==
    request; a pod states either."""
    where = f"pod {pod_key(pod)}"
    s = spec(pod)
    names = sorted({k for ctr in [*(s.get("containers") or []), *(s.get("initContainers") or [])]
                    for k in _merged(ctr) if _is_extended(k)})
    if not names:
        return {}

    def read(ctr: Obj) -> list[int]:
        merged = _merged(ctr)
        return [_read(n, quantity.count, merged[n], where) if n in merged else 0 for n in names]

    return {n: v for n, v in zip(names, effective(pod, read, len(names)), strict=True) if v}


def pod_gpu_resource(pod: Obj) -> int:
    """Whole GPUs the pod holds by its ``nvidia.com/gpu`` requests (:func:`pod_devices`)."""
    return pod_devices(pod).get(c.RESOURCE_GPU, 0)


def has_demand_annotations(pod: Obj) -> bool:
    ann = annotations_of(pod)
    return c.ANNOTATION_GPU_COUNT in ann or c.ANNOTATION_GPU_MILLI in ann


def pod_gpu_demand(pod: Obj) -> tuple[int, int, int]:
    """(gpu_count, milli per GPU, GPU memory MiB): the webhook's normalised annotations when
    present, else whole GPUs from the resources. Whether the resources bear the annotations
    out is :func:`admission.controller.demand.problem`'s question."""
    if has_demand_annotations(pod):
        count = _int_annotation(pod, c.ANNOTATION_GPU_COUNT, 1)
        per = _int_annotation(pod, c.ANNOTATION_GPU_MILLI, MILLI) if count else 0
        memory = _int_annotation(pod, c.ANNOTATION_GPU_MEMORY_MIB, 0)
        return count, per, memory
    count = pod_gpu_resource(pod)
    return count, (MILLI if count else 0), 0


def tolerations(pod: Obj) -> tuple[Toleration, ...]:
    out = []
    for t in spec(pod).get("tolerations") or []:
        op = t.get("operator") or "Equal"  # the API server's default
        out.append(Toleration(key=t.get("key") or "", operator=op, value=t.get("value") or "",
                              effect=t.get("effect") or ""))
    return tuple(out)


def required_affinity(pod: Obj) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    """Required node affinity as terms (ORed) of requirements (ANDed); ``matchFields`` on
    ``metadata.name`` become requirements on :data:`keys.FIELD_NODE_NAME`."""
    aff = ((spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for term in aff.get("nodeSelectorTerms") or []:
        reqs = [
            NodeSelectorRequirement(r["key"], r["operator"], tuple(r.get("values") or ()))
            for r in (term.get("matchExpressions") or [])
        ]
        reqs += [
            NodeSelectorRequirement(keys.FIELD_NODE_NAME, r["operator"],
                                    tuple(r.get("values") or ()))
            for r in (term.get("matchFields") or [])
        ]
        terms.append(tuple(reqs))
    return tuple(terms)


def pod_models(pod: Obj) -> frozenset[str]:
    raw = annotations_of(pod).get(c.ANNOTATION_ALLOWED_MODELS, "")
    return frozenset(m.strip() for m in raw.split(",") if m.strip())


def qos_class(pod: Obj) -> str | None:
    """The QoS class the pod names (the webhook's label, else the user's annotation); what
    the controller uses is this bounded by the tenant's policy
    (:func:`admission.controller.trust.qos_of`)."""
    return labels(pod).get(c.LABEL_QOS_CLASS) or annotations_of(pod).get(c.ANNOTATION_QOS_CLASS)


def pod_request(pod: Obj, qos: str | None = None) -> PodRequest:
    """The pod as the solver sees it, named ``namespace/name`` to be unique cluster-wide;
    ``qos``: its QoS class as the policy bounds it."""
    cpu, mem = pod_cpu_memory(pod)
    count, per, gpu_mem = pod_gpu_demand(pod)
    try:
        return PodRequest(
            name=pod_key(pod), cpu_milli=cpu, memory_mib=mem, gpu_count=count, gpu_milli=per,
            gpu_memory_mib=gpu_mem, models=pod_models(pod), qos_class=qos,
            node_selector=dict(spec(pod).get("nodeSelector") or {}),
            affinity=required_affinity(pod), tolerations=tolerations(pod),
        )
    except ValueError as exc:
        raise TranslationError(f"pod {pod_key(pod)}: {exc}") from None


def topology_requirement(pod: Obj) -> TopologyRequirement | None:
    raw = annotations_of(pod).get(c.ANNOTATION_TOPOLOGY, "").strip()
    if not raw:
        return None
    mode, _, level = raw.rpartition(":")
    if mode not in ("", "required", "preferred") or not level:
        raise TranslationError(
            f"pod {pod_key(pod)}: annotation {c.ANNOTATION_TOPOLOGY}={raw!r}: "
            "write '<level>' or 'required:<level>'"
        )
    return TopologyRequirement(level, TopologyMode.REQUIRED if mode == "required"
                               else TopologyMode.PREFERRED)


def priority(pod: Obj) -> int:
    """The priority the pod asks for (Berth's annotation, else its PriorityClass's value),
    unbounded: :func:`admission.controller.trust.priority_of` bounds it by the policy."""
    if c.ANNOTATION_PRIORITY in annotations_of(pod):
        return _int_annotation(pod, c.ANNOTATION_PRIORITY, 0)
    return int(spec(pod).get("priority") or 0)


def namespace(pod: Obj) -> str:
    return str(meta(pod).get("namespace") or "default")


def gang_name(pod: Obj) -> str:
    """``namespace/gang``; a pod without a gang is a gang of one named after itself."""
    ns = meta(pod).get("namespace") or "default"
    name = annotations_of(pod).get(c.ANNOTATION_GANG_NAME) or labels(pod).get(c.LABEL_GANG)
    return f"{ns}/{name}" if name else pod_key(pod)


def gang_size(pod: Obj) -> int | None:
    """The gang size the pod declares (1 for a pod of no gang); None when it declares none
    (the webhook could not read one: the gang is then as large as the pods that exist)."""
    if not (annotations_of(pod).get(c.ANNOTATION_GANG_NAME) or labels(pod).get(c.LABEL_GANG)):
        return 1
    if not annotations_of(pod).get(c.ANNOTATION_GANG_SIZE):
        return None
    size = _int_annotation(pod, c.ANNOTATION_GANG_SIZE, 1)
    if size < 1:
        raise TranslationError(f"pod {pod_key(pod)}: {c.ANNOTATION_GANG_SIZE} must be >= 1")
    return size


# --------------------------------------------------------------------------------------------
# Assignments (what Berth wrote at release)
# --------------------------------------------------------------------------------------------


def assigned_shares(pod: Obj) -> tuple[str, tuple[GpuShare, ...]] | None:
    """(node, GPU shares) from Berth's assignment annotations, or None when absent or broken."""
    ann = annotations_of(pod)
    node = ann.get(c.ANNOTATION_ASSIGNED_NODE)
    if not node:
        return None
    idx_raw = ann.get(c.ANNOTATION_ASSIGNED_GPUS, "")
    milli_raw = ann.get(c.ANNOTATION_ASSIGNED_GPU_MILLI, "")
    try:
        idx = [int(x) for x in idx_raw.split(",") if x.strip()]
        per = [int(x) for x in milli_raw.split(",") if x.strip()] or [MILLI] * len(idx)
        if len(per) != len(idx):
            return None
        return node, tuple(GpuShare(i, m) for i, m in zip(idx, per, strict=True))
    except ValueError:
        return None


def assignment_annotations(node: str, shares: tuple[GpuShare, ...], plan_id: str,
                           at: str) -> dict[str, str]:
    return {
        c.ANNOTATION_ASSIGNED_NODE: node,
        c.ANNOTATION_ASSIGNED_GPUS: ",".join(str(s.index) for s in shares),
        c.ANNOTATION_ASSIGNED_GPU_MILLI: ",".join(str(s.milli) for s in shares),
        c.ANNOTATION_ASSIGNED_AT: at,
        c.ANNOTATION_PLAN: plan_id,
    }


def plan_id(pod: Obj) -> str | None:
    return annotations_of(pod).get(c.ANNOTATION_PLAN) or None


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


def node_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_gpus(node: Obj) -> tuple[GPU, ...]:
    """GPUs as the node agent describes them (``berth.dev/gpus``: model, memory, NVLink domain,
    MIG, lost GPUs left out), else from the allocatable ``nvidia.com/gpu`` count and the GPU
    Feature Discovery labels (model, memory per GPU)."""
    name = meta(node).get("name", "")
    described = annotations_of(node).get(agent_schema.ANNOTATION_GPUS)
    if described:
        try:
            return agent_schema.gpus_from_annotation(name, described)
        except ValueError as exc:
            raise TranslationError(f"node {name}: {exc}") from None
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    raw = alloc.get(c.RESOURCE_GPU)
    if raw is None:
        return ()
    n = _read(c.RESOURCE_GPU, quantity.count, raw, f"node {name}")
    lab = labels(node)
    model = lab.get(c.LABEL_GPU_PRODUCT) or "unknown"
    try:
        mem = int(lab.get(keys.LABEL_GPU_MEMORY, "0") or 0)
    except ValueError:
        mem = 0
    return tuple(GPU(index=i, model=model, memory_mib=mem) for i in range(n))


def node_from_api(node: Obj, topology_keys: Mapping[str, str]) -> Node:
    """``topology_keys`` maps a topology level (``rack``) to the node label that names it."""
    m = meta(node)
    name = m.get("name", "")
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    where = f"node {name}"
    cpu = _read("cpu", quantity.milli, alloc.get("cpu", 0), where)
    mem = _read("memory", quantity.mib, alloc.get("memory", 0), where)
    lab = dict(labels(node))
    taints = tuple(
        Taint(t["key"], t.get("value") or "", t.get("effect") or "NoSchedule")
        for t in spec(node).get("taints") or []
    )
    topo = {level: lab[key] for level, key in topology_keys.items() if key in lab}
    lab[keys.FIELD_NODE_NAME] = name
    try:
        return Node(
            name=name, cpu_milli=cpu, memory_mib=mem, gpus=node_gpus(node), labels=lab,
            taints=taints, topology=topo, schedulable=not spec(node).get("unschedulable", False),
            ready=node_ready(node),
        )
    except ValueError as exc:
        raise TranslationError(f"{where}: {exc}") from None


_DRA_SUFFIXES = c.DRA_MODEL_SUFFIXES


def running_from_pod(pod: Obj, node: Node, taken: Mapping[int, int], *,
                     planned: tuple[GpuShare, ...] | None = None, tenant: str | None = None,
                     qos: str | None = None) -> Running:
    """What a pod holds on ``node``: ``planned``, the shares Berth recorded for it when the
    caller trusts them (:func:`admission.controller.trust.planned_shares`), else whole GPUs by
    its ``nvidia.com/gpu`` requests on the indexes with most room left (``taken``: milli
    already held per index). ``tenant`` and ``qos``: what the policy says of the pod (None for
    a pod of no tenant: anonymous usage, charged to nobody)."""
    cpu, mem = pod_cpu_memory(pod)
    shares: tuple[GpuShare, ...]
    valid = {g.index for g in node.gpus}
    if planned is not None and all(s.index in valid for s in planned):
        shares = planned
    else:  # whole GPUs of the device plugin (a DRA GPU is held through its claim)
        want = pod_gpu_resource(pod)
        plugin = {g.index for g in node.gpus if not g.model.endswith(_DRA_SUFFIXES)}
        order = sorted(plugin, key=lambda i: (taken.get(i, 0), i))
        shares = tuple(GpuShare(i, MILLI) for i in order[:want])
    return Running(name=pod_key(pod), node=node.name, cpu_milli=cpu, memory_mib=mem,
                   gpus=shares, tenant=tenant, qos_class=qos)
