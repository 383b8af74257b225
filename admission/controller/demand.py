"""Do a pod's resources bear out the GPU demand the webhook wrote on it?

The webhook translates a pod's GPU demand into the sharing backend's resources at CREATE
(:mod:`admission.sharing`) and records the demand as annotations (``berth.dev/gpu-count``,
``berth.dev/gpu-milli``) for the controller. The resources are what the API server, the
scheduler and the device plugin enforce; the annotations are only metadata. So the controller
plans with the annotations only when the resources say the same: this module reads the
resources back in the vocabulary of the backend the pod was translated for
(``berth.dev/sharing``, else the policy's) and names any difference. A pod whose demand is not
borne out is never released and never charged to a tenant.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.dra import DraState, is_dra_pod
from admission.controller.translate import Obj
from admission.policy import Sharing
from solver.types import MILLI

# HAMi's GPU memory resources: the pod's GPU memory, not its share of the GPU's compute.
_HAMI_MEMORY = (c.HAMI_GPU_MEM, c.HAMI_GPU_MEM_PERCENT)
_MIG_PREFIX = "nvidia.com/mig-"


def _vocabulary(name: str, backend: str, sharing: Sharing) -> bool:
    """Whether resource ``name`` expresses GPU compute under ``backend``."""
    if name == c.RESOURCE_GPU:
        return True
    if backend == "time-slicing":
        return name == sharing.time_slicing.resource_name
    if backend == "mps":
        return name == sharing.mps.resource_name
    if backend == "mig":
        return name.startswith(_MIG_PREFIX)
    if backend == "hami":
        return name == c.HAMI_GPU_CORES
    return False


def expected(count: int, milli: int, backend: str,
             sharing: Sharing) -> list[dict[str, int]] | str:
    """The GPU resources that express ``count`` GPUs of ``milli`` each under ``backend`` (any
    one of the returned sets), the way :mod:`admission.sharing` writes them; or why none can."""
    if count == 0:
        return [{}]
    if milli >= MILLI:
        ts = sharing.time_slicing
        if backend == "time-slicing" and ts.resource_name == c.RESOURCE_GPU:
            return [{c.RESOURCE_GPU: count * ts.replicas}]
        return [{c.RESOURCE_GPU: count}]
    if count != 1:
        return f"a share of one GPU ({milli} milli) cannot be {count} GPUs"
    if backend == "time-slicing":
        ts = sharing.time_slicing
        slots = milli * ts.replicas / MILLI
        if abs(slots - round(slots)) > 1e-6 or round(slots) < 1:
            return (f"a {milli / MILLI:g} share is not a whole number of the "
                    f"{ts.replicas} time-slicing slots of a GPU")
        return [{ts.resource_name: round(slots)}]
    if backend == "mps":
        return [{sharing.mps.resource_name: 1}]
    if backend == "mig":
        found = [{f"{_MIG_PREFIX}{p.name}": 1} for p in sharing.mig.profiles
                 if min(MILLI, max(1, round(p.fraction * MILLI))) == milli]
        return found or f"no MIG profile of the policy holds a share of {milli} milli"
    if backend == "hami":
        return [{c.RESOURCE_GPU: 1, c.HAMI_GPU_CORES: max(1, round(milli / 10))}]
    return f"sharing backend {backend!r} shares no GPU"


def _describe(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(resources.items())) or "no GPU resource"


def problem(pod: Obj, sharing: Sharing, dra: DraState | None = None) -> str | None:
    """Why the pod's GPU resources (or, for a pod whose GPUs come from ResourceClaims, its
    claims in ``dra``) do not bear out the demand Berth plans it with
    (:func:`translate.pod_gpu_demand`); None when they do. Raises
    :class:`translate.TranslationError` for a value that cannot be read at all."""
    count, milli, memory = tr.pod_gpu_demand(pod)
    if is_dra_pod(pod):
        return _claims_problem(pod, count, milli, memory, dra)
    backend = tr.annotations_of(pod).get(c.ANNOTATION_SHARING) or sharing.backend
    devices = tr.pod_devices(pod)
    have = {k: v for k, v in devices.items()
            if k not in _HAMI_MEMORY and _vocabulary(k, backend, sharing)}
    want = expected(count, milli, backend, sharing)
    said = (f"{c.ANNOTATION_GPU_COUNT}={count}, {c.ANNOTATION_GPU_MILLI}={milli}"
            if tr.has_demand_annotations(pod) else f"{count} GPUs")
    if isinstance(want, str):
        return f"its GPU demand ({said}) cannot be right: {want}"
    if have in want:
        return None
    return (f"its GPU demand ({said}) is not what its resources request "
            f"({_describe(have)}; {backend} sharing would need {_describe(want[0])})")


def _claims_problem(pod: Obj, count: int, milli: int, memory: int,
                    dra: DraState | None) -> str | None:
    said = f"{c.ANNOTATION_GPU_COUNT}={count}, {c.ANNOTATION_GPU_MILLI}={milli}"
    gpu = {k: v for k, v in tr.pod_devices(pod).items() if k.startswith(c.NVIDIA_PREFIX)}
    if gpu:
        return (f"its GPUs come from ResourceClaims, but it also requests {_describe(gpu)}")
    if dra is None:
        return "its GPUs come from ResourceClaims, which this check was not given"
    got = dra.demand(pod)
    if isinstance(got, str):
        return got
    if got[2]:  # a share by capacity: its memory is the claim's, its milli the webhook's
        if (count, memory) != (1, got[2]) or not 0 < milli <= MILLI:
            return (f"its GPU demand ({said}, {c.ANNOTATION_GPU_MEMORY_MIB}={memory}) is not "
                    f"what its ResourceClaims ask for (a share of one GPU holding {got[2]} MiB)")
        return None
    if got[:2] != (count, milli) or memory:
        return (f"its GPU demand ({said}) is not what its ResourceClaims ask for ({got[0]} "
                f"GPUs of {got[1]} milli)")
    return None
