"""The admission decision: one pure function from an AdmissionRequest and the policy to a
response (allowed, refused with a message, or allowed with a JSON Patch).

No I/O and no API calls happen here; the webhook server only parses and serialises around
:func:`review`, and reads the ResourceClaims and templates a pod names before it
(:mod:`admission.webhook.claims`). In scope are pod CREATEs in managed namespaces that ask
for GPUs. A pod in scope gets its tenant (always its namespace's), its gang, its demand
validated against the policy and translated into the sharing backend's resources, Berth's
labels and annotations, the downward-API env that will carry its GPU assignment, and Berth's
scheduling gate.

Nothing a pod brings is trusted: Berth's own keys (every label and annotation under
``berth.dev/`` but the few a user may write, see :data:`admission.constants.USER_ANNOTATIONS`)
are removed from any pod CREATE that reaches the webhook, in scope or not, and so is Berth's
scheduling gate from a pod out of scope, each with a warning naming what went; a pod in scope
gets Berth's values in their place. Every value a user may set is bounded by the policy.
"""

from __future__ import annotations

import json
import math
import re
from binascii import b2a_base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from admission import constants as c
from admission.backends import Backend, backend_named
from admission.durations import DURATION_FORM, parse_duration, shown_duration
from admission.jsonpatch import PatchOp, pointer
from admission.policy import Policy, Tenant
from admission.sharing import Reading, SharingAdapter, SharingError, Translation, adapter_for
from admission.webhook.demand import (
    GpuDemand,
    PodProblem,
    Slot,
    dra_demand,
    mapping,
    read_demand,
    shown,
    string_map,
)
from admission.webhook.gang import GangError, GangIdentity, identify_gang
from admission.webhook.patch import PatchBuilder
from admission.webhook.types import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReviewResponse,
)

try:  # orjson parses and serialises reviews several times faster than the standard library
    import orjson

    def loads(data: bytes) -> Any:
        """Parse JSON; ValueError on anything that is not JSON."""
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - the standard library does the same, slower

    def loads(data: bytes) -> Any:
        try:
            return json.loads(data)
        except RecursionError:  # orjson refuses such depth as a decode error; so does this
            raise ValueError("JSON nested too deeply") from None

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class MalformedReview(ValueError):
    """The body is not an AdmissionReview the webhook can answer: HTTP 400."""


class Outcome(StrEnum):
    """What the review did to the pod (a label of the decisions metric)."""

    UNTOUCHED = "untouched"
    MUTATED = "mutated"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Decision:
    response: AdmissionResponse
    outcome: Outcome
    reason: str  # short code for metrics: "unmanaged-namespace", "admitted", "bad-fraction", ...


# --------------------------------------------------------------------------------------------
# What the hot path needs from a policy version, computed once.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantRules:
    """A tenant's fields the review reads, taken out of the policy model once (several are
    derived properties that would otherwise be recomputed on every pod)."""

    tenant: Tenant
    name: str
    ceiling_milli: int | None
    max_gpus_per_pod: int | None
    max_gang_size: int | None
    queue: str | None
    default_qos_class: str | None
    allowed_models: tuple[str, ...]  # empty: any model
    allowed_qos_classes: tuple[str, ...]  # empty: any class
    max_priority: int  # |berth.dev/priority| <= this
    priority_source: str  # the policy field the bound comes from

    @staticmethod
    def build(tenant: Tenant, policy: Policy) -> TenantRules:
        return TenantRules(
            tenant=tenant,
            name=tenant.name,
            ceiling_milli=tenant.ceiling_milli,
            max_gpus_per_pod=tenant.limits.max_gpus_per_pod,
            max_gang_size=tenant.limits.max_gang_size,
            queue=policy.queue_for(tenant),
            default_qos_class=tenant.default_qos_class,
            allowed_models=tuple(tenant.allowed_models),
            allowed_qos_classes=tuple(tenant.allowed_qos_classes),
            max_priority=policy.max_priority(tenant),
            priority_source=("limits.maxPriority" if tenant.limits.max_priority is not None
                             else "admission.maxPriority"),
        )


@dataclass(frozen=True, slots=True)
class ReviewContext:
    policy: Policy
    adapter: SharingAdapter
    grid_milli: tuple[int, ...]
    model_memory: Mapping[str, int]
    levels: frozenset[str]
    qos_classes: frozenset[str]
    by_namespace: Mapping[str, TenantRules]
    generation: str
    refuse_tenant_mismatch: bool
    require_gang_size: bool
    release: Backend
    sharing_backend: str
    # Adapters are pure: a demand's translation is computed once per policy version (failures
    # are not cached, so their message is built again each time, as before).
    translations: dict[tuple[int, int, int], Translation]

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
            refuse_tenant_mismatch=policy.admission.tenant_mismatch == "refuse",
            require_gang_size=bool(policy.admission.require_gang_size),
            release=backend_named(policy.release.backend),
            sharing_backend=policy.sharing.backend,
            translations={},
        )

    def translate(self, milli: int, count: int, memory_mib: int) -> Translation:
        """The adapter's translation of a share (``milli`` < 1000) or of ``count`` whole GPUs;
        :class:`SharingError` when the backend cannot express it."""
        key = (milli, count, memory_mib) if milli < 1000 else (1000, count, 0)
        found = self.translations.get(key)
        if found is None:
            if milli < 1000:
                found = self.adapter.share(milli, memory_mib)
            else:
                found = self.adapter.whole(count)
            if len(self.translations) < 4096:  # bounded: counts and memory come from pods
                self.translations[key] = found
        return found


def _namespaces(policy: Policy) -> dict[str, TenantRules]:
    found: dict[str, TenantRules] = {}
    for tenant in policy.tenants:
        for ns in tenant.namespaces:
            if ns not in found:  # validation refuses a namespace claimed twice
                found[ns] = TenantRules.build(tenant, policy)
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
    return Decision({"uid": uid, "allowed": True}, Outcome.UNTOUCHED, reason)


def refusal(uid: str, problem: PodProblem) -> Decision:
    """The refusal of a pod for ``problem`` (for the server's own checks around the review)."""
    return _deny(uid, [problem])


def _deny(uid: str, problems: list[PodProblem]) -> Decision:
    text = "; ".join(f"{p.path}: {p.message}" for p in problems)
    return Decision(
        {
            "uid": uid,
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": f"Berth: {text}"},
        },
        Outcome.DENIED,
        problems[0].reason,
    )


# --------------------------------------------------------------------------------------------
# The decision
# --------------------------------------------------------------------------------------------


def review(request: Mapping[str, Any], policy: Policy,
           claims: Mapping[tuple[str, str], Any] | None = None) -> Decision:
    """Decide on one AdmissionRequest (already parsed by :func:`parse_review`). ``claims``: the
    ResourceClaims and ResourceClaimTemplates the pod names, by (kind, name), as the server read
    them from the pod's namespace (:func:`claim_names` says which; None when the pod names
    none)."""
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
    rules = ctx.by_namespace.get(str(namespace))
    if rules is None:
        return _out_of_scope(uid, pod, meta, "unmanaged-namespace")
    try:
        mapping(pod, "metadata", "metadata")
        labels = string_map(meta, "labels", "metadata.labels")
        annotations = string_map(meta, "annotations", "metadata.annotations")
        demand = read_demand(pod, annotations, ctx.adapter)
        spec = pod.get("spec")
        if isinstance(spec, dict) and spec.get("resourceClaims"):
            demand = dra_demand(pod, annotations, demand, claims or {})
    except PodProblem as problem:
        return _deny(uid, [problem])
    if demand is None:
        return _out_of_scope(uid, pod, meta, "no-gpu")
    return _admit(uid, request, pod, meta, labels, annotations, demand, rules, ctx)


def _out_of_scope(uid: str, pod: Mapping[str, Any], meta: Mapping[str, Any],
                  reason: str) -> Decision:
    """Allowed, less Berth's own keys and gate when the pod brought any: a pod Berth does not
    manage must not look managed (a forged tenant, placement or gate)."""
    ops: list[PatchOp] = []
    removed: list[str] = []
    for where, owned in (("labels", c.berth_owned_label), ("annotations",
                                                           c.berth_owned_annotation)):
        values = meta.get(where)
        if isinstance(values, dict) and values:
            for key in [k for k in values if isinstance(k, str) and owned(k)]:
                ops.append({"op": "remove", "path": pointer(("metadata", where, key))})
                removed.append(f"metadata.{where}[{key}]")
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    if isinstance(gates, list):
        for i in reversed(range(len(gates))):  # from the end: each removal shifts the rest
            gate = gates[i]
            if isinstance(gate, dict) and gate.get("name") == c.SCHEDULING_GATE:
                ops.append({"op": "remove", "path": f"/spec/schedulingGates/{i}"})
        if len(removed) < len(ops):
            removed.append(f"spec.schedulingGates[{c.SCHEDULING_GATE}]")
    if not ops:
        return _allow(uid, reason)
    response: AdmissionResponse = {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": b2a_base64(dumps(ops), newline=False).decode("ascii"),
        "warnings": [_removed_warning(removed)],
    }
    return Decision(response, Outcome.MUTATED, "berth-keys-removed")


def _removed_warning(removed: Sequence[str], most: int = 6) -> str:
    """One warning naming what was removed (the apiserver truncates long warnings)."""
    named = ", ".join(removed[:most])
    more = f" and {len(removed) - most} more" if len(removed) > most else ""
    return f"Berth removed {named}{more}: only Berth sets them"


def _admit(
    uid: str, request: Mapping[str, Any], pod: dict[str, Any], meta: Mapping[str, Any],
    labels: Mapping[str, str], annotations: Mapping[str, str], demand: GpuDemand,
    rules: TenantRules, ctx: ReviewContext,
) -> Decision:
    problems: list[PodProblem] = []
    warnings: list[str] = []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = {}

    # The checks run in a fixed order (the refusal lists every problem in that order); the
    # cheap common case of each is tested here so that a pod without it costs no call.
    if c.LABEL_TENANT in labels or c.LABEL_TENANT in annotations:
        _check_tenant(rules, labels, annotations, ctx, problems, warnings)
    env_names = _check_env(demand, problems)
    if spec.get("nodeName"):
        problems.append(PodProblem(
            "spec.nodeName", "a GPU pod managed by Berth is placed by Berth; remove nodeName",
            "node-name-set"))
    wanted = ctx.release.scheduler_name
    scheduler = _scheduler(spec, wanted, ctx.release.title, problems) if wanted else None
    models = _models(demand, rules, problems) if demand.models else rules.allowed_models
    translation: Translation | None
    direct = demand.direct
    if demand.dra is not None:  # the claims ask; the scheduler's DRA allocator hands out
        milli = round(demand.fraction * 1000) if demand.fraction is not None else 1000
        count = demand.count
        if demand.memory_mib:  # consumable capacity: the share of memory it holds
            milli = _capacity_share(demand, models, ctx, problems)
        translation = Translation(milli=milli)
    elif direct is not None:  # the backend's own resources, kept as the pod wrote them
        milli, count = _direct_share(demand, direct, models, ctx, problems), 1
        translation = direct.translation
    else:
        if demand.fraction is None and demand.memory_mib == 0:
            milli, count = 1000, demand.count
        else:
            milli, count = _share(demand, models, ctx, problems)
        translation = _translate(ctx, milli, count, demand, problems)
    if translation is not None:
        milli = translation.milli
    fallback = str(request.get("name") or meta.get("name") or uid)
    gang = _gang(meta, labels, annotations, fallback, rules, ctx, problems)
    _check_limits(rules, count, milli, gang, problems)
    qos = _qos(labels, annotations, rules, ctx, problems)
    if c.ANNOTATION_TOPOLOGY in annotations:
        _check_topology(annotations, ctx, problems)
    clamped = None
    if c.ANNOTATION_PRIORITY in annotations:
        _check_priority(annotations, rules, problems)
    else:
        clamped = _class_priority(spec, rules, warnings)
    if c.ANNOTATION_EXPECTED_RUNTIME in annotations:
        _check_expected_runtime(annotations, ctx, problems)
    if problems or translation is None or gang is None:
        return _deny(uid, problems)

    patch = PatchBuilder(pod)
    _patch_metadata(patch, meta, rules, gang, qos, count, milli, demand, models, ctx, labels,
                    annotations, warnings, clamped)
    _patch_resources(patch, demand, translation, ctx, milli)
    _patch_env(patch, demand, translation if milli < 1000 else None, env_names, warnings)
    gates = spec.get("schedulingGates")
    if not isinstance(gates, list):
        # spec is the pod's own map here (a pod without one has no container, so no demand)
        patch.ops.append({"op": "add", "path": "/spec/schedulingGates",
                          "value": [{"name": c.SCHEDULING_GATE}]})
    else:
        ours = [i for i, g in enumerate(gates)
                if isinstance(g, dict) and g.get("name") == c.SCHEDULING_GATE]
        if not ours:
            patch.extend_list(("spec", "schedulingGates"), gates, _GATE)
        for i in reversed(ours[1:]):  # the pod brought it more than once: keep the first
            patch.ops.append({"op": "remove", "path": f"/spec/schedulingGates/{i}"})
    if scheduler is not None:
        patch.set(("spec", "schedulerName"), scheduler)
    response: AdmissionResponse = {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": b2a_base64(dumps(patch.ops), newline=False).decode("ascii"),
    }
    if warnings:
        response["warnings"] = warnings
    return Decision(response, Outcome.MUTATED, "admitted")


# Berth's scheduling gate as the patch adds it (serialised, never mutated).
_GATE = ({"name": c.SCHEDULING_GATE},)


# --------------------------------------------------------------------------------------------
# Checks (each appends every problem it finds)
# --------------------------------------------------------------------------------------------


def _check_tenant(
    rules: TenantRules, labels: Mapping[str, str], annotations: Mapping[str, str],
    ctx: ReviewContext, problems: list[PodProblem], warnings: list[str],
) -> None:
    name = rules.name
    for where, values in (("labels", labels), ("annotations", annotations)):
        claimed = values.get(c.LABEL_TENANT)
        if claimed is None or claimed == name:
            continue
        path = f"metadata.{where}[{c.LABEL_TENANT}]"
        if ctx.refuse_tenant_mismatch:
            problems.append(PodProblem(
                path, f"claims tenant {shown(claimed)} but the namespace belongs to tenant "
                f"{name!r}; remove it or set it to {name!r}", "tenant-mismatch"))
        else:
            warnings.append(f"{path}: tenant {shown(claimed)} replaced by {name!r} "
                            "(the namespace's tenant)")


def _check_env(demand: GpuDemand, problems: list[PodProblem]) -> dict[Slot, set[str]]:
    """The patch appends to each GPU container's env, which must therefore be a list of named
    entries; returns the names each GPU container's env already has (one walk serves both)."""
    names: dict[Slot, set[str]] = {}
    for slot in demand.gpu_containers:
        key, i = slot
        env = demand.containers[key][i].get("env")
        if env is None:
            names[slot] = set()
            continue
        have: set[str] = set()
        ok = isinstance(env, list)
        if ok:
            for e in env:
                name = e.get("name") if isinstance(e, dict) else None
                if not isinstance(name, str):
                    ok = False
                    break
                have.add(name)
        if ok:
            names[slot] = have
        else:
            problems.append(PodProblem(f"spec.{key}[{i}].env",
                                       "must be a list of {name, value|valueFrom}",
                                       "malformed-pod"))
    return names


def _scheduler(
    spec: Mapping[str, Any], wanted: str, backend: str, problems: list[PodProblem],
) -> str | None:
    """The release backend's scheduler (``wanted``), to set at creation: ``schedulerName`` is
    immutable afterwards. None when the pod already names it, or names another (a problem)."""
    name = spec.get("schedulerName")
    if name in (None, "", "default-scheduler"):
        return wanted
    if name != wanted:
        problems.append(PodProblem(
            "spec.schedulerName", f"is {name!r} but this cluster releases GPU pods to "
            f"{backend}; remove it or set it to {wanted!r}", "scheduler-name"))
    return None


def _models(demand: GpuDemand, rules: TenantRules, problems: list[PodProblem]) -> tuple[str, ...]:
    """The models the pod named, less those the tenant may not use (a problem each)."""
    allowed = rules.allowed_models
    if allowed:
        bad = [m for m in demand.models if m not in allowed]
        if bad:
            problems.append(PodProblem(
                demand.models_path or f"metadata.annotations[{c.ANNOTATION_GPU_MODELS}]",
                f"GPU model {', '.join(bad)} is not allowed for tenant {rules.name!r}; "
                f"use one of: {', '.join(allowed)}", "model-not-allowed"))
            return tuple(m for m in demand.models if m in allowed)
    return demand.models


def _smallest_memory(models: tuple[str, ...], ctx: ReviewContext) -> int | None:
    known = [ctx.model_memory[m] for m in (models or tuple(ctx.model_memory))
             if m in ctx.model_memory]
    return min(known) if known else None


def _memory_fits(demand: GpuDemand, smallest: int | None, problems: list[PodProblem]) -> bool:
    if demand.memory_mib and smallest is not None and demand.memory_mib > smallest:
        problems.append(PodProblem(
            demand.memory_path or f"metadata.annotations[{c.ANNOTATION_GPU_MEMORY}]",
            f"{demand.memory_mib} MiB is more than a {smallest} MiB GPU holds; ask for less "
            "or restrict the pod to larger models", "bad-gpu-memory"))
        return False
    return True


def _on_grid(milli: int, path: str | None, ctx: ReviewContext,
             problems: list[PodProblem]) -> None:
    grid = ctx.grid_milli
    if milli not in grid and milli != 1000:
        problems.append(PodProblem(
            path or "metadata.annotations",
            f"{milli / 1000:g} is not on this cluster's fraction grid; use one of "
            f"{', '.join(f'{g / 1000:g}' for g in grid)}", "fraction-off-grid"))


def _direct_share(demand: GpuDemand, direct: Reading, models: tuple[str, ...],
                  ctx: ReviewContext, problems: list[PodProblem]) -> int:
    """The milli-GPU of a share asked for in the backend's resources, checked like one asked
    for by annotation (on the grid where the backend's shares are free, memory that fits)."""
    _memory_fits(demand, _smallest_memory(models, ctx), problems)
    if direct.on_grid:
        _on_grid(direct.milli, demand.fraction_path, ctx, problems)
    return direct.milli


def _capacity_share(demand: GpuDemand, models: tuple[str, ...], ctx: ReviewContext,
                    problems: list[PodProblem]) -> int:
    """The milli-GPU of a share by consumable capacity: the part of the smallest allowed
    model's memory it asks for, rounded up to a milli and not to the fraction grid (the driver
    hands out memory, not the backend's slots; a grid would hold more than the device gives)."""
    smallest = _smallest_memory(models, ctx)
    if not _memory_fits(demand, smallest, problems):
        return 1000
    if smallest is None:
        problems.append(PodProblem(
            demand.memory_path or "spec.resourceClaims",
            "cannot turn GPU memory into a share: the policy declares no gpuModels with their "
            "memory; ask the cluster admin to declare them", "bad-gpu-memory"))
        return 1000
    return min(1000, max(1, math.ceil(demand.memory_mib * 1000 / smallest)))


def _share(
    demand: GpuDemand, models: tuple[str, ...], ctx: ReviewContext, problems: list[PodProblem],
) -> tuple[int, int]:
    """(milli-GPU per GPU, GPU count) after the grid: an explicit fraction must sit on the grid,
    a memory request is rounded up to the next grid value."""
    smallest = _smallest_memory(models, ctx)
    if not _memory_fits(demand, smallest, problems):
        return 1000, 1
    grid = ctx.grid_milli
    if demand.fraction is not None:
        milli = round(demand.fraction * 1000)
        _on_grid(milli, demand.fraction_path, ctx, problems)
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
    ctx: ReviewContext, milli: int, count: int, demand: GpuDemand, problems: list[PodProblem],
) -> Translation | None:
    try:
        return ctx.translate(milli, count, demand.memory_mib)
    except SharingError as exc:
        path = demand.fraction_path or demand.memory_path or "metadata.annotations"
        problems.append(PodProblem(path, str(exc), "sharing"))
        return None


def _gang(
    meta: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str],
    fallback: str, rules: TenantRules, ctx: ReviewContext, problems: list[PodProblem],
) -> GangIdentity | None:
    try:
        gang = identify_gang(meta, labels, annotations, fallback)
    except GangError as exc:
        problems.append(PodProblem(exc.path, exc.message, "gang-size"))
        return None
    if gang.size is None and ctx.require_gang_size:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
            f"the size of gang {gang.name!r} ({gang.source}) is not stated on the pod; "
            f"annotate {c.ANNOTATION_GANG_SIZE} with the number of pods", "gang-size"))
    limit = rules.max_gang_size
    if gang.size is not None and limit is not None and gang.size > limit:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
            f"a gang of {gang.size} pods exceeds tenant {rules.name!r}'s limit of {limit}; "
            "split the job", "over-limit"))
    return gang


_LIMITS_PATH = f"spec.containers[*].resources.limits[{c.RESOURCE_GPU}]"


def _check_limits(
    rules: TenantRules, count: int, milli: int, gang: GangIdentity | None,
    problems: list[PodProblem],
) -> None:
    limit = rules.max_gpus_per_pod
    if limit is not None and count > limit:
        problems.append(PodProblem(
            _LIMITS_PATH, f"{count} GPUs exceed tenant {rules.name!r}'s limit of {limit} per "
            "pod; ask for fewer or split the pod", "over-limit"))
        return
    ceiling = rules.ceiling_milli
    if ceiling is None:
        return
    pods = gang.size if gang is not None and gang.size else 1
    need = count * milli * pods
    if need > ceiling:
        what = f"{count * milli / 1000:g} GPUs" + (f" x {pods} pods" if pods > 1 else "")
        problems.append(PodProblem(
            _LIMITS_PATH, f"{what} can never be admitted: tenant {rules.name!r} holds at most "
            f"{ceiling / 1000:g} GPUs (quota plus borrowing); ask for less", "over-quota"))


def _qos(
    labels: Mapping[str, str], annotations: Mapping[str, str], rules: TenantRules,
    ctx: ReviewContext, problems: list[PodProblem],
) -> str | None:
    """The pod's QoS class: the annotation or the label (the controller reads the label, which
    Berth then writes with the class checked here), else the tenant's default."""
    label = labels.get(c.LABEL_QOS_CLASS)
    annotation = annotations.get(c.ANNOTATION_QOS_CLASS)
    if label and annotation and label != annotation:
        problems.append(PodProblem(
            f"metadata.labels[{c.LABEL_QOS_CLASS}]",
            f"says {shown(label)} but the annotation {c.ANNOTATION_QOS_CLASS} says "
            f"{shown(annotation)}; keep one", "bad-qos-class"))
        return None
    if annotation:
        _check_qos(annotation, f"metadata.annotations[{c.ANNOTATION_QOS_CLASS}]", rules, ctx,
                   problems)
        return annotation
    if label:
        _check_qos(label, f"metadata.labels[{c.LABEL_QOS_CLASS}]", rules, ctx, problems)
        return label
    qos = rules.default_qos_class
    if qos is not None:
        _check_qos(qos, f"metadata.annotations[{c.ANNOTATION_QOS_CLASS}]", rules, ctx, problems)
    return qos


def _check_qos(
    name: str, path: str, rules: TenantRules, ctx: ReviewContext, problems: list[PodProblem],
) -> None:
    if name not in ctx.qos_classes:
        known = ", ".join(sorted(ctx.qos_classes)) or "none"
        problems.append(PodProblem(path, f"unknown QoS class {shown(name)}; use one of: {known}",
                                   "bad-qos-class"))
    elif rules.allowed_qos_classes and name not in rules.allowed_qos_classes:
        problems.append(PodProblem(
            path, f"QoS class {name!r} is not allowed for tenant {rules.name!r}; use one of: "
            f"{', '.join(rules.allowed_qos_classes)}", "bad-qos-class"))


def _check_topology(
    annotations: Mapping[str, str], ctx: ReviewContext, problems: list[PodProblem]
) -> None:
    raw = annotations[c.ANNOTATION_TOPOLOGY]
    mode, _, level = raw.rpartition(":")
    if mode not in ("", "required", "preferred") or level not in ctx.levels:
        problems.append(PodProblem(
            f"metadata.annotations[{c.ANNOTATION_TOPOLOGY}]",
            f"must be <level> or required:<level> with a level of "
            f"{', '.join(sorted(ctx.levels))}; got {shown(raw)}", "bad-topology"))


_PRIORITY = re.compile(r"-?[0-9]{1,7}")  # ASCII only: the controller reads it with int()


def _check_priority(annotations: Mapping[str, str], rules: TenantRules,
                    problems: list[PodProblem]) -> None:
    raw = annotations[c.ANNOTATION_PRIORITY]
    bound = rules.max_priority
    if _PRIORITY.fullmatch(raw) and -bound <= int(raw) <= bound:
        return
    problems.append(PodProblem(
        f"metadata.annotations[{c.ANNOTATION_PRIORITY}]",
        f"must be a whole number from -{bound} to {bound}, the priority bound of tenant "
        f"{rules.name!r} (policy {rules.priority_source}); got {shown(raw)}", "bad-priority"))


def _check_expected_runtime(annotations: Mapping[str, str], ctx: ReviewContext,
                            problems: list[PodProblem]) -> None:
    """A declared run time is an estimate (it plans when capacity frees, never backfill), but
    a tenant writes it: a malformed one or one over the policy's bound is refused."""
    raw = annotations[c.ANNOTATION_EXPECTED_RUNTIME]
    bound = ctx.policy.admission.max_expected_runtime_seconds
    seconds = parse_duration(raw)
    if seconds is not None and seconds <= bound:
        return
    what = (f"{shown(raw)} is longer than the policy's admission.maxExpectedRuntimeSeconds "
            f"({shown_duration(bound)})" if seconds is not None
            else f"{shown(raw)} is not a duration")
    problems.append(PodProblem(
        f"metadata.annotations[{c.ANNOTATION_EXPECTED_RUNTIME}]",
        f"{what}; write {DURATION_FORM}, at most {shown_duration(bound)}, or remove it",
        "bad-expected-runtime"))


def _class_priority(spec: Mapping[str, Any], rules: TenantRules,
                    warnings: list[str]) -> int | None:
    """A pod without berth.dev/priority is weighed by its ``spec.priority``, which the
    apiserver sets from the PriorityClass the pod names; beyond the tenant's bound, the bound
    (written as berth.dev/priority, which the controller reads first)."""
    value = spec.get("priority")
    bound = rules.max_priority
    if not isinstance(value, int) or isinstance(value, bool) or -bound <= value <= bound:
        return None
    clamped = max(-bound, min(bound, value))
    warnings.append(f"spec.priority: {value} (its PriorityClass) is beyond tenant "
                    f"{rules.name!r}'s priority bound; Berth weighs the pod at {clamped} "
                    f"({c.ANNOTATION_PRIORITY})")
    return clamped


# --------------------------------------------------------------------------------------------
# The patch
# --------------------------------------------------------------------------------------------

_LABELS = ("metadata", "labels")
_ANNOTATIONS = ("metadata", "annotations")


def _patch_metadata(
    patch: PatchBuilder, meta: Mapping[str, Any], rules: TenantRules, gang: GangIdentity,
    qos: str | None, count: int, milli: int, demand: GpuDemand, models: tuple[str, ...],
    ctx: ReviewContext, labels: Mapping[str, str], annotations: Mapping[str, str],
    warnings: list[str], priority: int | None,
) -> None:
    gang_label = gang.label
    new_labels = {
        c.LABEL_MANAGED: "true",
        c.LABEL_TENANT: rules.name,
        c.LABEL_GANG: gang_label,
    }
    if qos:
        new_labels[c.LABEL_QOS_CLASS] = qos
    queue = rules.queue
    new_annotations = {
        c.ANNOTATION_TENANT: rules.name,
        c.ANNOTATION_GANG_NAME: gang.name,
        c.ANNOTATION_GANG_SOURCE: gang.source,
        c.ANNOTATION_GPU_COUNT: str(count),
        c.ANNOTATION_GPU_MILLI: str(milli),
        c.ANNOTATION_GPU_MEMORY_MIB: str(demand.memory_mib),
        c.ANNOTATION_ALLOWED_MODELS: ",".join(models),
        c.ANNOTATION_SHARING: "dra" if demand.dra is not None else ctx.sharing_backend,
        c.ANNOTATION_POLICY_GENERATION: ctx.generation,
    }
    if gang.size is not None:
        new_annotations[c.ANNOTATION_GANG_SIZE] = str(gang.size)
    if queue:
        new_annotations[c.ANNOTATION_QUEUE] = queue
    if priority is not None:
        new_annotations[c.ANNOTATION_PRIORITY] = str(priority)
    ctx.release.creation_keys(queue=queue, group=gang_label, size=gang.size, labels=labels,
                              annotations=annotations, add_labels=new_labels,
                              add_annotations=new_annotations)
    # Berth's own keys the pod brought and Berth does not write itself go (the rest are
    # overwritten with Berth's values below).
    prefix, user = c.BERTH_PREFIX, c.USER_ANNOTATIONS  # inlined: this runs for every key
    drop_labels = [k for k in labels if k.startswith(prefix) and k not in new_labels]
    drop = [k for k in annotations
            if k.startswith(prefix) and k not in new_annotations and k not in user]
    if drop_labels or drop:
        warnings.append(_removed_warning([f"metadata.labels[{k}]" for k in drop_labels]
                                         + [f"metadata.annotations[{k}]" for k in drop]))
    # ``meta`` is the pod's metadata map as it arrived (``{}`` when it had none).
    patch.merge_map(_LABELS, meta.get("labels"), new_labels, drop_labels)
    existing = meta.get("annotations")
    if isinstance(existing, dict):
        patch.merge_map(_ANNOTATIONS, existing, new_annotations, drop)
    elif patch.obj.get("metadata") is meta:  # the pod's own metadata: add the map in one op
        patch.ops.append({"op": "add", "path": "/metadata/annotations", "value": new_annotations})
    else:
        patch.set(_ANNOTATIONS, new_annotations)


def _patch_resources(
    patch: PatchBuilder, demand: GpuDemand, translation: Translation, ctx: ReviewContext,
    milli: int,
) -> None:
    """Each container that asked for GPUs gets them in the backend's vocabulary (a share goes to
    every one of them, whole GPUs each its own count); a container that asked for none gets
    nothing, unless the pod asked for its GPU by annotation only."""
    if demand.direct is not None:
        return  # the backend's own resources, kept as the pod wrote them
    if milli < 1000:
        for slot in demand.gpu_containers:
            _apply(patch, demand, slot, translation)
        return
    counts = demand.gpu_counts
    for slot in demand.gpu_containers:
        have = counts.get(slot, 0)
        t = ctx.translate(1000, have, 0) if have else translation
        if have and t.resources == ((c.RESOURCE_GPU, have),) and not t.remove:
            continue  # already says what the backend needs
        _apply(patch, demand, slot, t)


def _apply(patch: PatchBuilder, demand: GpuDemand, slot: Slot, translation: Translation) -> None:
    key, index = slot
    resources = demand.containers[key][index].get("resources") or {}
    requests = resources.get("requests") or {}
    base = ("spec", key, index, "resources")
    touch_requests = bool(requests) and (
        any(k in requests for k, _ in translation.resources)
        or any(k in requests for k in translation.remove))
    kept = {k for k, _ in translation.resources} if translation.remove else ()
    for name in translation.remove:
        if name not in kept:
            patch.remove((*base, "limits", name))
            patch.remove((*base, "requests", name))
    for name, value in translation.resources:
        patch.set((*base, "limits", name), str(value))
        if touch_requests:
            patch.set((*base, "requests", name), str(value))


# The downward-API env entries, built once: JSON serialisation never mutates them.
_DOWNWARD_ENTRIES = tuple(
    (name, {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    for name, path in c.DOWNWARD_ENV
)
_DOWNWARD_NAMES = frozenset(name for name, _ in _DOWNWARD_ENTRIES)


@lru_cache(maxsize=64)
def _downward_ops(slot: Slot) -> tuple[PatchOp, ...]:
    """The ops appending every downward-API entry to container ``slot``'s existing env: the
    same on every pod, so built once (the patch is only serialised, never mutated)."""
    path = pointer(("spec", *slot, "env")) + "/-"
    return tuple({"op": "add", "path": path, "value": entry} for _, entry in _DOWNWARD_ENTRIES)


def _patch_env(
    patch: PatchBuilder, demand: GpuDemand, share: Translation | None,
    env_names: Mapping[Slot, set[str]], warnings: list[str],
) -> None:
    """Berth's env on each GPU container: the downward-API entries and the share's own env
    (MPS limits). An entry of the pod with one of those names is replaced: a container must
    not set its own GPU assignment or lift its MPS limit."""
    extra = share.env if share is not None else ()
    berth = _DOWNWARD_NAMES | {n for n, _ in extra} if extra else _DOWNWARD_NAMES
    for slot in demand.gpu_containers:
        key, i = slot
        have = env_names[slot]
        env = demand.containers[key][i].get("env")
        if env is not None and not extra and have.isdisjoint(_DOWNWARD_NAMES):
            patch.ops.extend(_downward_ops(slot))  # the common case: a list to append to
            continue
        if env is not None and not have.isdisjoint(berth):
            clash = [j for j, e in enumerate(env) if e["name"] in berth]
            for j in reversed(clash):  # from the end: each removal shifts the rest
                patch.ops.append({"op": "remove", "path": pointer(("spec", key, i, "env", j))})
            warnings.append(f"spec.{key}[{i}].env: Berth replaced "
                            f"{', '.join(sorted(have & berth))}: only Berth sets them")
        added: list[Any] = [entry for _, entry in _DOWNWARD_ENTRIES]
        added += [{"name": n, "value": v} for n, v in extra]
        patch.extend_list(("spec", key, i, "env"), env, added)
