"""Reading a pod's GPU demand from the vocabulary users already write.

Whole GPUs come from ``nvidia.com/gpu`` in any container's limits (or requests): app
containers, init containers and sidecars (init containers with ``restartPolicy: Always``),
added up the way Kubernetes computes a pod's effective request. A share of one GPU comes from
Berth's ``gpu-fraction`` / ``gpu-memory`` annotations, KAI's ``gpu-fraction`` /
``gpu-memory``, or the sharing backend's own resources (``nvidia.com/gpu.shared`` slots, a
``nvidia.com/mig-<profile>``, HAMi's ``gpucores``), read back by the backend's adapter. Any
other GPU resource under ``nvidia.com/`` is refused with the key to use. Acceptable models come
from Berth's ``gpu-models``, HAMi's ``use-gputype`` or a node selector on GPU Feature
Discovery's product label.

Every number is parsed strictly (ASCII digits, bounded length): ``str.isdigit`` and ``int``
accept superscripts, other scripts' digits, underscores and thousands of digits, and the
controller must read back exactly what was screened. Anything unreadable raises
:class:`PodProblem` naming the field and the fix.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from admission import constants as c
from admission.dra import ClaimProblem, PodAsk, pod_ask
from admission.dra.slices import mig_milli
from admission.sharing import Reading, SharingAdapter, SharingError

# ("containers", 2) or ("initContainers", 0): where a container sits in the pod spec.
Slot = tuple[str, int]

MAX_DIGITS = 6  # a GPU count, slot count or MiB figure longer than this is not a real request
_INT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")
_MEMORY = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})(Mi|Gi|M|G)?")
_DECIMAL = re.compile(r"[0-9]{0,3}(\.[0-9]{1,9})?")


class PodProblem(ValueError):
    """A field of the pod Berth cannot accept: ``path`` names it, ``message`` says the fix."""

    def __init__(self, path: str, message: str, reason: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.reason = reason  # short code for metrics


class GpuDemand(NamedTuple):
    """Immutable; a named tuple rather than a frozen dataclass because one is built for every
    GPU pod and a frozen dataclass sets each field through ``object.__setattr__``."""

    count: int  # type: ignore[assignment]  # whole GPUs, or 1 for a share (hides tuple.count)
    fraction: float | None  # share of one GPU the pod asked for (None: whole GPUs)
    fraction_path: str | None  # field the fraction came from
    memory_mib: int  # GPU memory asked for on one GPU (0: not asked)
    container: Slot  # container that carries a share asked for by annotation only
    gpu_containers: tuple[Slot, ...]  # containers that get GPU resources and the assignment env
    models: tuple[str, ...]  # models the pod itself asked for (empty: none named)
    containers: Mapping[str, Sequence[Mapping[str, Any]]] = {}  # by spec key, already checked
    gpu_counts: Mapping[Slot, int] = {}  # whole GPUs each container asks for (absent: none)
    direct: Reading | None = None  # a share asked for in the sharing backend's own resources
    memory_path: str | None = None  # field the GPU memory came from
    models_path: str | None = None  # field the models came from (None: Berth's annotation)
    dra: PodAsk | None = None  # the GPUs come from the pod's ResourceClaims (no resources)


_SHOWN = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 60, 60
_SHOWN.maxlist = _SHOWN.maxdict = 4


def shown(raw: object, limit: int = 40) -> str:
    """``raw`` as a message quotes it, cut short: a refusal must not echo a 256 KiB value, nor
    recurse through a value nested thousands deep (reprlib stops at two levels)."""
    text = _SHOWN.repr(raw)
    return text if len(text) <= limit else text[:limit] + "...'"


def mapping(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodProblem(path, f"must be a mapping, got {type(value).__name__}", "malformed-pod")
    return value


def string_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, str]:
    value = mapping(obj, key, path)
    for k, v in value.items():
        if not isinstance(v, str):
            raise PodProblem(f"{path}[{k}]", "must be a string", "malformed-pod")
    return value


def containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodProblem(f"spec.{key}", "must be a list of containers", "malformed-pod")
    for x in value:
        if not isinstance(x, dict):
            raise PodProblem(f"spec.{key}", "must be a list of containers", "malformed-pod")
    return value


def whole_number(raw: object, path: str, what: str, reason: str) -> int:
    """A non-negative count written in ASCII digits (as the apiserver writes quantities), at
    most :data:`MAX_DIGITS` long; :class:`PodProblem` naming ``path`` otherwise."""
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 10 ** MAX_DIGITS:
        return raw
    if isinstance(raw, str) and _INT.fullmatch(raw):
        return int(raw)
    raise PodProblem(path, f"must be a whole number of {what} in digits 0-9 (at most "
                           f"{MAX_DIGITS}), got {shown(raw)}", reason)


# A resource that asks for a GPU or a part of one: ``nvidia.com/gpu``, the sharing backends'
# ``nvidia.com/gpu.shared``, ``nvidia.com/mig-*``, HAMi's ``nvidia.com/gpu*``. (Other
# ``nvidia.com/`` resources, such as network devices, are not GPUs.)
_NVIDIA = c.NVIDIA_PREFIX
_AFTER = len(_NVIDIA)
_GPU_FAMILIES = ("gpu", "mig-")


def gpu_resource(name: str) -> bool:
    return name.startswith(_NVIDIA) and name.startswith(_GPU_FAMILIES, _AFTER)


def _gpu_resources(container: Mapping[str, Any], key: str, index: int) -> dict[str, int]:
    """The GPU resources of ``spec.<key>[index]`` (limits, else requests; both must agree).
    Field paths are built only for an error message: this runs for every container of every
    pod that reaches the webhook."""
    found: dict[str, int] = {}
    resources = container.get("resources")
    if resources is None:
        return found
    if not isinstance(resources, dict):
        mapping(container, "resources", f"spec.{key}[{index}].resources")  # raises
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        if values is None:
            continue
        if not isinstance(values, dict):
            mapping(resources, kind, f"spec.{key}[{index}].resources.{kind}")  # raises
        for name, raw in values.items():
            if not (name.startswith(_NVIDIA) and name.startswith(_GPU_FAMILIES, _AFTER)):
                continue
            if raw.__class__ is str and raw.isascii() and raw.isdigit() and len(raw) <= MAX_DIGITS:
                n = int(raw)  # the common case, as the apiserver writes it: "8"
            elif name == c.RESOURCE_GPU:
                n = _gpu_count(raw, resource_path(key, index, kind, name))
            else:
                n = whole_number(raw, resource_path(key, index, kind, name), "devices",
                                 "bad-gpu-resource")
            before = found.get(name)
            if before is None:
                found[name] = n
            elif before != n:
                raise PodProblem(resource_path(key, index, kind, name),
                                 f"is {n} but the limit is {before}; a device's request must "
                                 "equal its limit (or be left out)", "bad-gpu-count")
    return found


def resource_path(key: str, index: int, kind: str, name: str) -> str:
    return f"spec.{key}[{index}].resources.{kind}[{name}]"


def _first_path(container: Mapping[str, Any], key: str, index: int, name: str) -> str:
    """The field a resource of a container was read from (limits first)."""
    resources = container.get("resources") or {}
    kind = "limits" if name in (resources.get("limits") or {}) else "requests"
    return resource_path(key, index, kind, name)


def _gpu_count(raw: object, path: str) -> int:
    try:
        return whole_number(raw, path, "GPUs", "bad-gpu-count")
    except PodProblem as problem:
        raise PodProblem(path, f"{problem.message}; for a share of one GPU set the annotation "
                               f"{c.ANNOTATION_FRACTION} (e.g. \"0.5\")", "bad-gpu-count") from None


def _fraction(annotations: Mapping[str, str]) -> tuple[float | None, str | None]:
    if c.ANNOTATION_FRACTION not in annotations and c.KAI_FRACTION not in annotations:
        return None, None
    found: list[tuple[str, float]] = []
    for key in (c.ANNOTATION_FRACTION, c.KAI_FRACTION):
        if key not in annotations:
            continue
        raw = annotations[key]
        if not (_DECIMAL.fullmatch(raw) and raw not in ("", ".")):
            raise PodProblem(f"metadata.annotations[{key}]",
                             f"must be a number in (0, 1], got {shown(raw)}; write it like \"0.5\"",
                             "bad-fraction")
        value = float(raw)
        if not math.isfinite(value) or not 0 < value <= 1:
            raise PodProblem(f"metadata.annotations[{key}]",
                             f"must be in (0, 1], got {shown(raw)}; for more than one GPU "
                             f"request whole GPUs with {c.RESOURCE_GPU}", "bad-fraction")
        found.append((key, value))
    if len(found) == 2 and abs(found[0][1] - found[1][1]) > 1e-9:
        raise PodProblem(
            f"metadata.annotations[{c.KAI_FRACTION}]",
            f"says {found[1][1]:g} but {c.ANNOTATION_FRACTION} says {found[0][1]:g}; keep one",
            "bad-fraction",
        )
    return found[0][1], f"metadata.annotations[{found[0][0]}]"


def _memory(annotations: Mapping[str, str]) -> tuple[int, str | None]:
    for key in (c.ANNOTATION_GPU_MEMORY, c.KAI_MEMORY):
        if key in annotations:
            raw = annotations[key]
            m = _MEMORY.fullmatch(raw)
            if not m or int(m.group(1)) < 1:
                raise PodProblem(
                    f"metadata.annotations[{key}]",
                    f"must be GPU memory in MiB (e.g. \"20480\" or \"20Gi\"), got {shown(raw)}",
                    "bad-gpu-memory",
                )
            scale = 1024 if m.group(2) in ("Gi", "G") else 1
            return int(m.group(1)) * scale, f"metadata.annotations[{key}]"
    return 0, None


def _models(annotations: Mapping[str, str], node_selector: Mapping[str, str]) -> tuple[str, ...]:
    if (c.ANNOTATION_GPU_MODELS not in annotations and c.HAMI_GPU_TYPE not in annotations
            and c.LABEL_GPU_PRODUCT not in node_selector):
        return ()
    names: list[str] = []
    for key in (c.ANNOTATION_GPU_MODELS, c.HAMI_GPU_TYPE):
        if key in annotations:
            names += [m.strip() for m in annotations[key].split(",") if m.strip()]
    if c.LABEL_GPU_PRODUCT in node_selector:
        names.append(node_selector[c.LABEL_GPU_PRODUCT])
    return tuple(dict.fromkeys(names))


def _vocabulary(adapter: SharingAdapter) -> str:
    """How a pod asks for GPUs on this cluster (the fix in a refusal of another resource)."""
    own = (f", or the sharing backend's {', '.join(sorted(adapter.resources))}"
           if adapter.resources else "")
    return (f"ask for whole GPUs with {c.RESOURCE_GPU}, for a share with the annotation "
            f"{c.ANNOTATION_FRACTION} (e.g. \"0.5\"){own}")


def effective_count(counts: Mapping[Slot, int], inits: Sequence[Mapping[str, Any]]) -> int:
    """The pod's GPUs as Kubernetes computes an effective request: the larger of the app
    containers plus every sidecar, and the peak while init containers run one by one (each
    beside the sidecars started before it)."""
    sidecars = [ct.get("restartPolicy") == "Always" for ct in inits]
    app = sum(n for (key, i), n in counts.items() if key == "containers" or sidecars[i])
    peak = running = 0
    for i, sidecar in enumerate(sidecars):
        n = counts.get(("initContainers", i), 0)
        if sidecar:
            running += n
            peak = max(peak, running)
        else:
            peak = max(peak, n + running)
    return max(app, peak)


def read_demand(pod: Mapping[str, Any], annotations: Mapping[str, str],
                adapter: SharingAdapter) -> GpuDemand | None:
    """The pod's GPU demand, or None when it asks for no GPU at all."""
    spec = mapping(pod, "spec", "spec")
    by_key = {"containers": containers(spec, "containers"),
              "initContainers": containers(spec, "initContainers")}
    counts: dict[Slot, int] = {}
    direct: tuple[Slot, Reading, str] | None = None
    for key, listed in by_key.items():
        for i, ct in enumerate(listed):
            found = _gpu_resources(ct, key, i)
            if not found:
                continue
            if len(found) == 1 and c.RESOURCE_GPU in found:  # whole GPUs: the common case
                if found[c.RESOURCE_GPU]:  # nvidia.com/gpu: 0 asks for nothing
                    counts[(key, i)] = found[c.RESOURCE_GPU]
                continue
            if found.get(c.RESOURCE_GPU) == 0:
                del found[c.RESOURCE_GPU]
            others = [name for name in found if name != c.RESOURCE_GPU]
            paths = {name: _first_path(ct, key, i, name) for name in found}
            direct = _direct(adapter, found, paths, others, direct, (key, i))
    mains, inits = by_key["containers"], by_key["initContainers"]
    if not counts:
        count = 0
    elif inits:
        count = effective_count(counts, inits)
    else:
        count = sum(counts.values())
    if annotations:
        fraction, fraction_path = _fraction(annotations)
        memory, memory_path = _memory(annotations)
    else:
        fraction, fraction_path, memory, memory_path = None, None, 0, None
    if count == 0 and fraction is None and memory == 0 and direct is None:
        return None
    if not mains:
        raise PodProblem("spec.containers", "a pod needs at least one container", "malformed-pod")
    if annotations.get(c.KAI_FRACTION_DEVICES, "1") != "1":
        raise PodProblem(
            f"metadata.annotations[{c.KAI_FRACTION_DEVICES}]",
            "shares of several GPUs are not supported; ask for a share of one GPU "
            f"or for whole GPUs with {c.RESOURCE_GPU}",
            "bad-fraction",
        )
    node_selector = (string_map(spec, "nodeSelector", "spec.nodeSelector")
                     if "nodeSelector" in spec else {})
    models = _models(annotations, node_selector) if annotations or node_selector else ()
    if direct is not None:
        slot, reading, path = direct
        asked = fraction_path or memory_path
        if asked:
            raise PodProblem(asked, f"asks for a share that {path} already asks for; keep one",
                             "bad-fraction")
        if count:
            raise PodProblem(path, f"a share of one GPU cannot be combined with {count} whole "
                                   f"GPUs ({c.RESOURCE_GPU}) in other containers", "bad-fraction")
        return GpuDemand(count=1, fraction=reading.milli / 1000, fraction_path=path,
                         memory_mib=reading.memory_mib, container=slot, gpu_containers=(slot,),
                         models=models, containers=by_key, gpu_counts={}, direct=reading,
                         memory_path=path)
    shared = fraction is not None or memory > 0
    if shared and count > 1:
        raise PodProblem(
            "metadata.annotations",
            f"a share of one GPU cannot be combined with {count} whole GPUs; "
            f"drop the fraction/memory annotation or set {c.RESOURCE_GPU} to 1",
            "bad-fraction",
        )
    asking = tuple(counts)  # app containers first, then init containers, each in order
    target: Slot = asking[0] if asking else ("containers", 0)
    wanted = annotations.get(c.KAI_FRACTION_CONTAINER)
    if shared and wanted:
        target = _named(by_key, wanted)
    slots = asking if asking and (not shared or target in asking) else (*asking, target)
    return GpuDemand(
        count=max(count, 1),
        fraction=fraction,
        fraction_path=fraction_path,
        memory_mib=memory,
        container=target,
        gpu_containers=slots,
        models=models,
        containers=by_key,
        gpu_counts=counts,
        memory_path=memory_path,
    )


def _direct(adapter: SharingAdapter, found: Mapping[str, int], paths: Mapping[str, str],
            others: list[str], before: tuple[Slot, Reading, str] | None, slot: Slot,
            ) -> tuple[Slot, Reading, str]:
    """The share one container asks for in the sharing backend's resources."""
    path = paths[others[0]]
    foreign = [name for name in others if name not in adapter.resources]
    if foreign:
        name = foreign[0]
        raise PodProblem(paths[name], f"{name} is not a GPU resource this cluster hands out "
                                      f"(sharing backend {adapter.name}); {_vocabulary(adapter)}",
                         "bad-gpu-resource")
    if before is not None:
        raise PodProblem(path, f"{before[2]} already asks for a share; a pod takes one share "
                               "of one GPU, in one container", "bad-fraction")
    try:
        return slot, adapter.read(found), path
    except SharingError as exc:
        raise PodProblem(path, str(exc), "sharing") from None


def _named(by_key: Mapping[str, Sequence[Mapping[str, Any]]], wanted: str) -> Slot:
    for key, listed in by_key.items():
        for i, ct in enumerate(listed):
            if ct.get("name") == wanted:
                return key, i
    names = [str(ct.get("name")) for listed in by_key.values() for ct in listed]
    raise PodProblem(f"metadata.annotations[{c.KAI_FRACTION_CONTAINER}]",
                     f"names no container of this pod ({', '.join(names)})", "bad-fraction")


def dra_demand(pod: Mapping[str, Any], annotations: Mapping[str, str],
               plugin: GpuDemand | None, claims: Mapping[tuple[str, str], Any]) -> GpuDemand | None:
    """The pod's GPU demand through its ResourceClaims (``claims``: the claims and templates it
    names, as the webhook read them from its namespace), or ``plugin`` (the demand of its
    resources) when no claim asks for GPUs."""
    try:
        ask = pod_ask(pod, claims)
    except ClaimProblem as problem:
        raise PodProblem(problem.path, problem.message, f"dra-{problem.reason}") from None
    if ask is None:
        return plugin
    path = ask.claims[0].path
    for key in (c.ANNOTATION_FRACTION, c.KAI_FRACTION, c.ANNOTATION_GPU_MEMORY, c.KAI_MEMORY):
        if key in annotations:
            raise PodProblem(f"metadata.annotations[{key}]",
                             "asks for a share of a GPU, but the pod's GPUs come from "
                             f"ResourceClaims ({path}); drop the annotation, or ask for a MIG "
                             f"device with class {c.DRA_MIG_CLASS}", "dra-mixed")
    if plugin is not None:
        raise PodProblem(path, f"asks for GPUs through a ResourceClaim and the pod also asks "
                               f"for GPU resources ({c.RESOURCE_GPU} or a share); ask for them "
                               "one way", "dra-mixed")
    milli = 1000
    if ask.mig:
        if ask.count or len(ask.mig) > 1:
            raise PodProblem(path, "asks for more than one MIG device, or for MIG devices and "
                                   "whole GPUs; a pod takes whole GPUs or one MIG device",
                             "dra-mig")
        milli = mig_milli(ask.mig[0])
        if not milli:
            raise PodProblem(path, "asks for a MIG device without naming its profile; add a "
                                   'selector device.attributes["gpu.nvidia.com"].profile == '
                                   '"<n>g.<m>gb"' if not ask.mig[0] else
                             f"names MIG profile {ask.mig[0]!r}, which is not of the form "
                             "<n>g.<m>gb", "dra-mig")
    spec = mapping(pod, "spec", "spec")
    by_key = {"containers": containers(spec, "containers"),
              "initContainers": containers(spec, "initContainers")}
    if not by_key["containers"]:
        raise PodProblem("spec.containers", "a pod needs at least one container", "malformed-pod")
    names = {r.name for r in ask.claims}
    slots = tuple((key, i) for key, listed in by_key.items() for i, ct in enumerate(listed)
                  if any(isinstance(x, dict) and x.get("name") in names
                         for x in ((ct.get("resources") or {}).get("claims") or [])))
    slots = slots or (("containers", 0),)  # claims the pod holds but no container names
    models = tuple(sorted(ask.models))
    node_selector = (string_map(spec, "nodeSelector", "spec.nodeSelector")
                     if "nodeSelector" in spec else {})
    if c.LABEL_GPU_PRODUCT in node_selector or c.ANNOTATION_GPU_MODELS in annotations:
        named = set(_models(annotations, node_selector))
        models = tuple(m for m in models if m in named) if models else tuple(sorted(named))
        if not models:
            raise PodProblem(path, "allows no GPU model that the pod's node selector or "
                                   f"{c.ANNOTATION_GPU_MODELS} allows", "dra-selector")
    memory_path = None
    if ask.memory_mib:  # a share by consumable capacity: its memory, turned into a share
        memory_path = f"{path} (capacity.requests.memory)"
    return GpuDemand(count=ask.count or 1, fraction=None if milli == 1000 else milli / 1000,
                     fraction_path=path if milli < 1000 else None, memory_mib=ask.memory_mib,
                     memory_path=memory_path,
                     container=slots[0], gpu_containers=slots, models=models,
                     containers=by_key, gpu_counts={}, models_path=path, dra=ask)
