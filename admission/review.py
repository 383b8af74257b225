"""The admission decision: one pure function from an AdmissionRequest and the policy to a
response (allowed, refused with a message, or allowed with a JSON Patch).

No I/O and no API calls happen here; the webhook server only parses and serialises around
:func:`review`. In scope are pod CREATEs in managed namespaces that ask for GPUs; everything
else is allowed untouched. A pod in scope gets its tenant (always its namespace's), its gang,
its demand validated against the policy and translated into the sharing backend's resources,
Berth's labels and annotations, the downward-API env that will carry its GPU assignment, and
Berth's scheduling gate.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission import constants as c
from admission.gang import GangError, GangIdentity, identify_gang
from admission.patch import PatchBuilder
from admission.policy_model import Policy, Tenant
from admission.review_demand import (
    GpuDemand,
    PodProblem,
    mapping,
    read_demand,
    string_map,
)
from admission.review_types import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReviewResponse,
)
from admission.sharing import SharingAdapter, SharingError, Translation, adapter_for

try:  # orjson parses and serialises reviews several times faster than the standard library
    import orjson

    def loads(data: bytes) -> Any:
        """Parse JSON; ValueError on anything that is not JSON."""
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - the standard library does the same, slower

    def loads(data: bytes) -> Any:
        return json.loads(data)

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class MalformedReview(ValueError):
    """The body is not an AdmissionReview the webhook can answer: HTTP 400."""


@dataclass(frozen=True, slots=True)
class Decision:
    response: AdmissionResponse
    outcome: str  # "untouched" | "mutated" | "denied"
    reason: str  # short code for metrics: "unmanaged-namespace", "admitted", "bad-fraction", ...


# --------------------------------------------------------------------------------------------
# What the hot path needs from a policy version, computed once.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReviewContext:
    policy: Policy
    adapter: SharingAdapter
    grid_milli: tuple[int, ...]
    model_memory: Mapping[str, int]
    levels: frozenset[str]
    qos_classes: frozenset[str]
    by_namespace: Mapping[str, Tenant]
    generation: str

    @staticmethod
    def build(policy: Policy) -> ReviewContext:
        return ReviewContext(
            policy=policy,
            by_namespace=_namespaces(policy),
            generation=policy.generation,
            adapter=adapter_for(policy.sharing),
            grid_milli=tuple(sorted({round(f * 1000) for f in policy.sharing.fraction_grid})),
            model_memory={m.name: m.memory_mib for m in policy.gpu_models},
            levels=frozenset(level.name for level in policy.topology.levels),
            qos_classes=frozenset(q.name for q in policy.qos_classes),
        )


def _namespaces(policy: Policy) -> dict[str, Tenant]:
    found: dict[str, Tenant] = {}
    for tenant in policy.tenants:
        for ns in tenant.namespaces:
            found.setdefault(ns, tenant)  # validation refuses a namespace claimed twice
    return found


_last: list[ReviewContext] = []  # the context of the policy reviewed last (identity check)


def context_for(policy: Policy) -> ReviewContext:
    """The review look-ups of ``policy``; the webhook reviews with one policy object until a
    reload, so an identity check on the last one avoids even a dictionary look-up."""
    if _last and _last[0].policy is policy:
        return _last[0]
    ctx = policy.memo("review", ReviewContext.build)
    _last[:] = [ctx]
    return ctx


# --------------------------------------------------------------------------------------------
# Envelope
# --------------------------------------------------------------------------------------------


def parse_review(body: object) -> tuple[str, AdmissionRequest]:
    """The apiVersion and request of an AdmissionReview, or :class:`MalformedReview`."""
    if not isinstance(body, dict):
        raise MalformedReview("the body must be a JSON object (an AdmissionReview)")
    version = body.get("apiVersion")
    if version not in REVIEW_VERSIONS:
        raise MalformedReview(f"apiVersion must be admission.k8s.io/v1, got {version!r}")
    if body.get("kind") != "AdmissionReview":
        raise MalformedReview(f"kind must be AdmissionReview, got {body.get('kind')!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid must be a non-empty string")
    for key in ("kind", "object"):
        if request.get(key) is not None and not isinstance(request[key], dict):
            raise MalformedReview(f"request.{key} must be an object")
    return str(version), request  # type: ignore[return-value]


def review_response(api_version: str, response: AdmissionResponse) -> AdmissionReviewResponse:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def _allow(uid: str, reason: str) -> Decision:
    return Decision({"uid": uid, "allowed": True}, "untouched", reason)


def _deny(uid: str, problems: list[PodProblem]) -> Decision:
    text = "; ".join(f"{p.path}: {p.message}" for p in problems)
    return Decision(
        {
            "uid": uid,
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": f"Berth: {text}"},
        },
        "denied",
        problems[0].reason,
    )


# --------------------------------------------------------------------------------------------
# The decision
# --------------------------------------------------------------------------------------------


def review(request: Mapping[str, Any], policy: Policy) -> Decision:
    """Decide on one AdmissionRequest (already parsed by :func:`parse_review`)."""
    uid = str(request.get("uid", ""))
    kind = request.get("kind") or {}
    if kind.get("kind") != "Pod" or kind.get("group", "") != "" or request.get("subResource"):
        return _allow(uid, "not-a-pod")
    if request.get("operation") != "CREATE":
        return _allow(uid, "not-create")
    pod = request.get("object")
    if not isinstance(pod, dict):
        return _allow(uid, "no-object")
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace = request.get("namespace") or meta.get("namespace") or ""
    ctx = context_for(policy)
    tenant = ctx.by_namespace.get(str(namespace))
    if tenant is None:
        return _allow(uid, "unmanaged-namespace")
    try:
        mapping(pod, "metadata", "metadata")
        labels = string_map(meta, "labels", "metadata.labels")
        annotations = string_map(meta, "annotations", "metadata.annotations")
        demand = read_demand(pod, annotations)
    except PodProblem as problem:
        return _deny(uid, [problem])
    if demand is None:
        return _allow(uid, "no-gpu")
    return _admit(uid, request, pod, meta, labels, annotations, demand, tenant, ctx)


def _admit(
    uid: str, request: Mapping[str, Any], pod: dict[str, Any], meta: Mapping[str, Any],
    labels: Mapping[str, str], annotations: Mapping[str, str], demand: GpuDemand,
    tenant: Tenant, ctx: ReviewContext,
) -> Decision:
    policy = ctx.policy
    problems: list[PodProblem] = []
    warnings: list[str] = []
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)

    _check_tenant(tenant, labels, annotations, policy, problems, warnings)
    _check_env(spec, demand, problems)
    if spec.get("nodeName"):
        problems.append(PodProblem(
            "spec.nodeName", "a GPU pod managed by Berth is placed by Berth; remove nodeName",
            "node-name-set"))
    scheduler = _scheduler(spec, policy, problems)
    models = _models(demand, tenant, ctx, problems)
    milli, count = _share(demand, models, ctx, problems)
    translation = _translate(ctx.adapter, milli, count, demand, problems)
    if translation is not None:
        milli = translation.milli
    fallback = str(request.get("name") or meta.get("name") or uid)
    gang = _gang(meta, labels, annotations, fallback, tenant, policy, problems)
    _check_limits(tenant, count, milli, gang, problems)
    qos = _qos(annotations, tenant, ctx, problems)
    _check_topology(annotations, ctx, problems)
    _check_priority(annotations, problems)
    if problems or translation is None or gang is None:
        return _deny(uid, problems)

    patch = PatchBuilder(pod)
    _patch_metadata(patch, tenant, gang, qos, count, milli, demand, models, ctx, labels,
                    annotations, warnings)
    _patch_resources(patch, spec, demand, translation, ctx.adapter, milli)
    _patch_env(patch, spec, demand, translation)
    gates = spec.get("schedulingGates")
    if not (isinstance(gates, list)
            and any(isinstance(g, dict) and g.get("name") == c.SCHEDULING_GATE for g in gates)):
        patch.extend_list(("spec", "schedulingGates"), gates, [{"name": c.SCHEDULING_GATE}])
    if scheduler is not None:
        patch.set(("spec", "schedulerName"), scheduler)
    response: AdmissionResponse = {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(dumps(patch.ops)).decode(),
    }
    if warnings:
        response["warnings"] = warnings
    return Decision(response, "mutated", "admitted")


# --------------------------------------------------------------------------------------------
# Checks (each appends every problem it finds)
# --------------------------------------------------------------------------------------------


def _check_tenant(
    tenant: Tenant, labels: Mapping[str, str], annotations: Mapping[str, str], policy: Policy,
    problems: list[PodProblem], warnings: list[str],
) -> None:
    for where, values in (("labels", labels), ("annotations", annotations)):
        claimed = values.get(c.LABEL_TENANT)
        if claimed is None or claimed == tenant.name:
            continue
        path = f"metadata.{where}[{c.LABEL_TENANT}]"
        if policy.admission.tenant_mismatch == "refuse":
            problems.append(PodProblem(
                path, f"claims tenant {claimed!r} but the namespace belongs to tenant "
                f"{tenant.name!r}; remove it or set it to {tenant.name!r}", "tenant-mismatch"))
        else:
            warnings.append(f"{path}: tenant {claimed!r} replaced by {tenant.name!r} "
                            "(the namespace's tenant)")


def _check_env(spec: Mapping[str, Any], demand: GpuDemand, problems: list[PodProblem]) -> None:
    """The patch appends to each GPU container's env, which must therefore be a list."""
    mains = demand.containers
    for i in demand.gpu_containers:
        env = mains[i].get("env")
        if env is None:
            continue
        ok = isinstance(env, list)
        if ok:
            for e in env:
                if not (isinstance(e, dict) and isinstance(e.get("name"), str)):
                    ok = False
                    break
        if not ok:
            problems.append(PodProblem(f"spec.containers[{i}].env",
                                       "must be a list of {name, value|valueFrom}",
                                       "malformed-pod"))


def _scheduler(spec: Mapping[str, Any], policy: Policy, problems: list[PodProblem]) -> str | None:
    """Volcano needs ``schedulerName: volcano`` set at creation (it is immutable afterwards)."""
    if policy.release.backend != "volcano":
        return None
    name = spec.get("schedulerName")
    if name in (None, "", "default-scheduler"):
        return c.VOLCANO_SCHEDULER
    if name != c.VOLCANO_SCHEDULER:
        problems.append(PodProblem(
            "spec.schedulerName", f"is {name!r} but this cluster releases GPU pods to "
            f"Volcano; remove it or set it to {c.VOLCANO_SCHEDULER!r}", "scheduler-name"))
    return None


def _models(
    demand: GpuDemand, tenant: Tenant, ctx: ReviewContext, problems: list[PodProblem]
) -> tuple[str, ...]:
    allowed = tenant.allowed_models
    if not demand.models:
        return tuple(allowed)
    if allowed:
        bad = [m for m in demand.models if m not in allowed]
        if bad:
            problems.append(PodProblem(
                f"metadata.annotations[{c.ANNOTATION_GPU_MODELS}]",
                f"GPU model {', '.join(bad)} is not allowed for tenant {tenant.name!r}; "
                f"use one of: {', '.join(allowed)}", "model-not-allowed"))
            return tuple(m for m in demand.models if m in allowed)
    return demand.models


def _share(
    demand: GpuDemand, models: tuple[str, ...], ctx: ReviewContext, problems: list[PodProblem],
) -> tuple[int, int]:
    """(milli-GPU per GPU, GPU count) after the grid: an explicit fraction must sit on the grid,
    a memory request is rounded up to the next grid value."""
    if demand.fraction is None and demand.memory_mib == 0:
        return 1000, demand.count
    known = [ctx.model_memory[m] for m in (models or tuple(ctx.model_memory))
             if m in ctx.model_memory]
    smallest = min(known) if known else None
    if demand.memory_mib and smallest is not None and demand.memory_mib > smallest:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GPU_MEMORY}]",
            f"{demand.memory_mib} MiB is more than a {smallest} MiB GPU holds; ask for less "
            "or restrict the pod to larger models", "bad-gpu-memory"))
        return 1000, 1
    grid = ctx.grid_milli
    if demand.fraction is not None:
        milli = round(demand.fraction * 1000)
        if milli not in grid and milli != 1000:
            problems.append(PodProblem(
                f"metadata.annotations[{demand.fraction_source}]",
                f"{demand.fraction:g} is not on this cluster's fraction grid; use one of "
                f"{', '.join(f'{g / 1000:g}' for g in grid)}", "fraction-off-grid"))
        return milli, 1
    if smallest is None:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GPU_MEMORY}]",
            "cannot turn GPU memory into a share: the policy declares no gpuModels; "
            f"set {c.ANNOTATION_FRACTION} instead", "bad-gpu-memory"))
        return 1000, 1
    wanted = math.ceil(demand.memory_mib * 1000 / smallest)
    return next((g for g in grid if g >= wanted), 1000), 1


def _translate(
    adapter: SharingAdapter, milli: int, count: int, demand: GpuDemand,
    problems: list[PodProblem],
) -> Translation | None:
    try:
        if milli < 1000:
            return adapter.share(milli, demand.memory_mib)
        return adapter.whole(count)
    except SharingError as exc:
        key = demand.fraction_source or c.ANNOTATION_GPU_MEMORY
        problems.append(PodProblem(f"metadata.annotations[{key}]", str(exc), "sharing"))
        return None


def _gang(
    meta: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str],
    fallback: str, tenant: Tenant, policy: Policy, problems: list[PodProblem],
) -> GangIdentity | None:
    try:
        gang = identify_gang(meta, labels, annotations, fallback)
    except GangError as exc:
        problems.append(PodProblem(exc.path, exc.message, "gang-size"))
        return None
    if gang.size is None and policy.admission.require_gang_size:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
            f"the size of gang {gang.name!r} ({gang.source}) is not stated on the pod; "
            f"annotate {c.ANNOTATION_GANG_SIZE} with the number of pods", "gang-size"))
    limit = tenant.limits.max_gang_size
    if gang.size is not None and limit is not None and gang.size > limit:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
            f"a gang of {gang.size} pods exceeds tenant {tenant.name!r}'s limit of {limit}; "
            "split the job", "over-limit"))
    return gang


def _check_limits(
    tenant: Tenant, count: int, milli: int, gang: GangIdentity | None,
    problems: list[PodProblem],
) -> None:
    path = f"spec.containers[*].resources.limits[{c.RESOURCE_GPU}]"
    limit = tenant.limits.max_gpus_per_pod
    if limit is not None and count > limit:
        problems.append(PodProblem(
            path, f"{count} GPUs exceed tenant {tenant.name!r}'s limit of {limit} per pod; "
            "ask for fewer or split the pod", "over-limit"))
        return
    ceiling = tenant.ceiling_milli
    if ceiling is None:
        return
    pods = gang.size if gang is not None and gang.size else 1
    need = count * milli * pods
    if need > ceiling:
        what = f"{count * milli / 1000:g} GPUs" + (f" x {pods} pods" if pods > 1 else "")
        problems.append(PodProblem(
            path, f"{what} can never be admitted: tenant {tenant.name!r} holds at most "
            f"{ceiling / 1000:g} GPUs (quota plus borrowing); ask for less", "over-quota"))


def _qos(
    annotations: Mapping[str, str], tenant: Tenant, ctx: ReviewContext,
    problems: list[PodProblem],
) -> str | None:
    name = annotations.get(c.ANNOTATION_QOS_CLASS) or tenant.default_qos_class
    if name is None:
        return None
    path = f"metadata.annotations[{c.ANNOTATION_QOS_CLASS}]"
    if name not in ctx.qos_classes:
        known = ", ".join(sorted(ctx.qos_classes)) or "none"
        problems.append(PodProblem(path, f"unknown QoS class {name!r}; use one of: {known}",
                                   "bad-qos-class"))
    elif tenant.allowed_qos_classes and name not in tenant.allowed_qos_classes:
        problems.append(PodProblem(
            path, f"QoS class {name!r} is not allowed for tenant {tenant.name!r}; use one of: "
            f"{', '.join(tenant.allowed_qos_classes)}", "bad-qos-class"))
    return name


def _check_topology(
    annotations: Mapping[str, str], ctx: ReviewContext, problems: list[PodProblem]
) -> None:
    raw = annotations.get(c.ANNOTATION_TOPOLOGY)
    if raw is None:
        return
    mode, _, level = raw.rpartition(":")
    if mode not in ("", "required", "preferred") or level not in ctx.levels:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_TOPOLOGY}]",
            f"must be <level> or required:<level> with a level of "
            f"{', '.join(sorted(ctx.levels))}; got {raw!r}", "bad-topology"))


def _check_priority(annotations: Mapping[str, str], problems: list[PodProblem]) -> None:
    raw = annotations.get(c.ANNOTATION_PRIORITY)
    if raw is not None and not raw.strip().lstrip("-").isdigit():
        problems.append(PodProblem(f"metadata.annotations[{c.ANNOTATION_PRIORITY}]",
                                   f"must be a whole number, got {raw!r}", "bad-priority"))


# --------------------------------------------------------------------------------------------
# The patch
# --------------------------------------------------------------------------------------------


def _patch_metadata(
    patch: PatchBuilder, tenant: Tenant, gang: GangIdentity, qos: str | None, count: int,
    milli: int, demand: GpuDemand, models: tuple[str, ...], ctx: ReviewContext,
    labels: Mapping[str, str], annotations: Mapping[str, str], warnings: list[str],
) -> None:
    policy = ctx.policy
    new_labels = {
        c.LABEL_MANAGED: "true",
        c.LABEL_TENANT: tenant.name,
        c.LABEL_GANG: gang.label,
    }
    if qos:
        new_labels[c.LABEL_QOS_CLASS] = qos
    backend_annotations: dict[str, str] = {}
    queue = policy.queue_for(tenant)
    _backend_keys_at_creation(policy.release.backend, queue, gang, labels, annotations,
                              new_labels, backend_annotations)
    meta = patch.obj.get("metadata")
    existing = meta if isinstance(meta, dict) else {}
    patch.merge_map(("metadata", "labels"), existing.get("labels"), new_labels)
    new_annotations = {
        c.ANNOTATION_TENANT: tenant.name,
        c.ANNOTATION_GANG_NAME: gang.name,
        c.ANNOTATION_GANG_SOURCE: gang.source,
        c.ANNOTATION_GPU_COUNT: str(count),
        c.ANNOTATION_GPU_MILLI: str(milli),
        c.ANNOTATION_GPU_MEMORY_MIB: str(demand.memory_mib),
        c.ANNOTATION_ALLOWED_MODELS: ",".join(models),
        c.ANNOTATION_SHARING: policy.sharing.backend,
        c.ANNOTATION_POLICY_GENERATION: ctx.generation,
    }
    if gang.size is not None:
        new_annotations[c.ANNOTATION_GANG_SIZE] = str(gang.size)
    if queue:
        new_annotations[c.ANNOTATION_QUEUE] = queue
    new_annotations.update(backend_annotations)
    drop = [key for key in c.ASSIGNMENT_ANNOTATIONS if key in annotations]
    for key in drop:
        warnings.append(f"metadata.annotations[{key}]: removed; only Berth assigns GPUs")
    if isinstance(existing.get("annotations"), dict):
        patch.merge_map(("metadata", "annotations"), existing["annotations"], new_annotations,
                        drop)
    else:
        patch.set(("metadata", "annotations"), new_annotations)


def _backend_keys_at_creation(
    backend: str, queue: str | None, gang: GangIdentity, labels: Mapping[str, str],
    annotations: Mapping[str, str], new_labels: dict[str, str], new_annotations: dict[str, str],
) -> None:
    """Keys the release backend reads only at creation, added where the user left them out.

    Kueue gates and manages a pod only if its queue label (and, for a group, the pod-group
    keys) is there when Kueue's own webhook sees the CREATE, which runs after Berth's. Volcano
    reads the group and queue from annotations. Keys the user wrote are kept as they are.
    """
    group = gang.size is not None and gang.size > 1
    if backend == "kueue":
        if queue and c.KUEUE_QUEUE_LABEL not in labels:
            new_labels[c.KUEUE_QUEUE_LABEL] = queue
        if group and c.KUEUE_POD_GROUP_LABEL not in labels:
            new_labels[c.KUEUE_POD_GROUP_LABEL] = gang.label
            new_annotations[c.KUEUE_POD_GROUP_COUNT] = str(gang.size)
    elif backend == "volcano":
        if queue and c.VOLCANO_QUEUE_ANNOTATION not in annotations:
            new_annotations[c.VOLCANO_QUEUE_ANNOTATION] = queue
        if c.VOLCANO_GROUP_ANNOTATION not in annotations:
            new_annotations[c.VOLCANO_GROUP_ANNOTATION] = gang.label


def _patch_resources(
    patch: PatchBuilder, spec: Mapping[str, Any], demand: GpuDemand, translation: Translation,
    adapter: SharingAdapter, milli: int,
) -> None:
    mains = demand.containers
    if milli < 1000:
        _apply(patch, mains, demand.container, translation)
        return
    for i in demand.gpu_containers:
        have = _gpu_count(mains[i])
        t = adapter.whole(max(have, 1)) if have else translation
        if have and t.resources == ((c.RESOURCE_GPU, have),) and not t.remove:
            continue  # already says what the backend needs
        _apply(patch, mains, i, t)


def _gpu_count(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        values = resources.get(kind) or {}
        if c.RESOURCE_GPU in values:
            return int(str(values[c.RESOURCE_GPU]).strip())
    return 0


def _apply(
    patch: PatchBuilder, mains: Sequence[Mapping[str, Any]], index: int, translation: Translation
) -> None:
    resources = mains[index].get("resources") or {}
    requests = resources.get("requests") or {}
    base = ("spec", "containers", index, "resources")
    touch_requests = any(k in requests for k, _ in translation.resources) or any(
        k in requests for k in translation.remove
    )
    for key in translation.remove:
        if key not in dict(translation.resources):
            patch.remove((*base, "limits", key))
            patch.remove((*base, "requests", key))
    for key, value in translation.resources:
        patch.set((*base, "limits", key), str(value))
        if touch_requests:
            patch.set((*base, "requests", key), str(value))


# The downward-API env entries, built once: JSON serialisation never mutates them.
_DOWNWARD_ENTRIES = tuple(
    (name, {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    for name, path in c.DOWNWARD_ENV
)


def _patch_env(
    patch: PatchBuilder, spec: Mapping[str, Any], demand: GpuDemand, translation: Translation
) -> None:
    mains = demand.containers
    for i in demand.gpu_containers:
        env = mains[i].get("env")
        have = {e["name"] for e in env} if isinstance(env, list) else set()
        added: list[Any] = [entry for name, entry in _DOWNWARD_ENTRIES if name not in have]
        if i == demand.container:
            added += [{"name": n, "value": v} for n, v in translation.env if n not in have]
        patch.extend_list(("spec", "containers", i, "env"), env, added)
