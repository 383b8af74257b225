"""Reading a pod's GPU demand from the vocabulary users already write.

Whole GPUs come from ``nvidia.com/gpu`` in a container's limits (or requests); a share of one
GPU from Berth's ``gpu-fraction`` / ``gpu-memory`` annotations or KAI's ``gpu-fraction`` /
``gpu-memory``; acceptable models from Berth's ``gpu-models``, HAMi's ``use-gputype`` or a node
selector on GPU Feature Discovery's product label. Anything unreadable raises
:class:`PodProblem` naming the field and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from admission import constants as c

_MEMORY = re.compile(r"^\s*(\d+)\s*(Mi|Gi|M|G)?\s*$")


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
    fraction_source: str | None  # annotation key the fraction came from
    memory_mib: int  # GPU memory asked for on one GPU (0: not asked)
    container: int  # container that carries the GPU resources
    gpu_containers: tuple[int, ...]  # containers that get the assignment env
    models: tuple[str, ...]  # models the pod itself asked for (empty: none named)
    containers: tuple[Mapping[str, Any], ...] = ()  # spec.containers, already checked
    gpu_counts: tuple[int, ...] = ()  # whole GPUs each of ``containers`` asks for


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


def _gpus(container: Mapping[str, Any], key: str, index: int) -> int:
    """Whole GPUs in ``spec.<key>[index]``'s limits (else requests). Field paths are built
    only for an error message: this runs for every container of every GPU pod."""
    resources = container.get("resources")
    if resources is None:
        return 0
    if not isinstance(resources, dict):
        mapping(container, "resources", f"spec.{key}[{index}].resources")  # raises
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        if values is None:
            continue
        if not isinstance(values, dict):
            mapping(resources, kind, f"spec.{key}[{index}].resources.{kind}")  # raises
        if c.RESOURCE_GPU in values:
            raw = values[c.RESOURCE_GPU]
            text = str(raw).strip() if not isinstance(raw, bool) else ""
            if not text.isdigit():
                raise PodProblem(
                    f"spec.{key}[{index}].resources.{kind}[{c.RESOURCE_GPU}]",
                    f"must be a whole number of GPUs, got {raw!r}; for a share of one GPU "
                    f"set the annotation {c.ANNOTATION_FRACTION} (e.g. \"0.5\")",
                    "bad-gpu-count",
                )
            return int(text)
    return 0


def _fraction(annotations: Mapping[str, str]) -> tuple[float | None, str | None]:
    if c.ANNOTATION_FRACTION not in annotations and c.KAI_FRACTION not in annotations:
        return None, None
    found: list[tuple[str, float]] = []
    for key in (c.ANNOTATION_FRACTION, c.KAI_FRACTION):
        if key not in annotations:
            continue
        raw = annotations[key]
        try:
            value = float(raw)
        except ValueError:
            raise PodProblem(f"metadata.annotations[{key}]",
                             f"must be a number in (0, 1], got {raw!r}", "bad-fraction") from None
        if not math.isfinite(value) or not 0 < value <= 1:
            raise PodProblem(f"metadata.annotations[{key}]",
                             f"must be in (0, 1], got {raw!r}; for more than one GPU "
                             f"request whole GPUs with {c.RESOURCE_GPU}", "bad-fraction")
        found.append((key, value))
    if len(found) == 2 and abs(found[0][1] - found[1][1]) > 1e-9:
        raise PodProblem(
            f"metadata.annotations[{c.KAI_FRACTION}]",
            f"says {found[1][1]:g} but {c.ANNOTATION_FRACTION} says {found[0][1]:g}; keep one",
            "bad-fraction",
        )
    return (found[0][1], found[0][0]) if found else (None, None)


def _memory(annotations: Mapping[str, str]) -> int:
    for key in (c.ANNOTATION_GPU_MEMORY, c.KAI_MEMORY):
        if key in annotations:
            raw = annotations[key]
            m = _MEMORY.match(raw)
            if not m or int(m.group(1)) < 1:
                raise PodProblem(
                    f"metadata.annotations[{key}]",
                    f"must be GPU memory in MiB (e.g. \"20480\" or \"20Gi\"), got {raw!r}",
                    "bad-gpu-memory",
                )
            scale = 1024 if m.group(2) in ("Gi", "G") else 1
            return int(m.group(1)) * scale
    return 0


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


def read_demand(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> GpuDemand | None:
    """The pod's GPU demand, or None when it asks for no GPU at all."""
    spec = mapping(pod, "spec", "spec")
    mains = containers(spec, "containers")
    inits = containers(spec, "initContainers")
    per_main = [_gpus(ct, "containers", i) for i, ct in enumerate(mains)]
    per_init = [_gpus(ct, "initContainers", i) for i, ct in enumerate(inits)]
    if annotations:
        fraction, source = _fraction(annotations)
        memory = _memory(annotations)
    else:
        fraction, source, memory = None, None, 0
    # Init containers run one at a time before the main ones: the pod holds the larger need.
    count = max(sum(per_main), max(per_init, default=0))
    if count == 0 and fraction is None and memory == 0:
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
    gpu_containers = tuple([i for i, n in enumerate(per_main) if n > 0])
    shared = fraction is not None or memory > 0
    if shared and count > 1:
        raise PodProblem(
            "metadata.annotations",
            f"a share of one GPU cannot be combined with {count} whole GPUs; "
            f"drop the fraction/memory annotation or set {c.RESOURCE_GPU} to 1",
            "bad-fraction",
        )
    target = gpu_containers[0] if gpu_containers else 0
    wanted = annotations.get(c.KAI_FRACTION_CONTAINER)
    if shared and wanted:
        names = [ct.get("name") for ct in mains]
        if wanted not in names:
            raise PodProblem(
                f"metadata.annotations[{c.KAI_FRACTION_CONTAINER}]",
                f"names no container of this pod ({', '.join(map(str, names))})",
                "bad-fraction",
            )
        target = names.index(wanted)
    node_selector = (string_map(spec, "nodeSelector", "spec.nodeSelector")
                     if "nodeSelector" in spec else {})
    return GpuDemand(
        count=max(count, 1),
        fraction=fraction,
        fraction_source=source,
        memory_mib=memory,
        container=target,
        gpu_containers=gpu_containers or (target,),
        models=_models(annotations, node_selector) if annotations or node_selector else (),
        containers=tuple(mains),
        gpu_counts=tuple(per_main),
    )
