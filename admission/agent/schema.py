"""The node labels and annotations the agent publishes, and how the controller reads them back.

One place for both directions, so the writer and the reader cannot drift apart; the documented
form of this schema is docs/node-labels.md. Labels are short, selectable facts (node selectors
and affinity can use them); per-GPU detail that does not fit in a label value travels as JSON in
annotations. Keys under ``nvidia.com/`` follow GPU Feature Discovery's meaning so that manifests
and tools written for GFD keep working; everything else lives under Berth's domain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from admission.constants import DOMAIN
from solver.types import GPU, MigSlice, ProblemError

SCHEMA_VERSION: Final = "v1"

# --------------------------------------------------------------------------------------------
# GPU Feature Discovery's labels (written only when the agent stands in for GFD).
# --------------------------------------------------------------------------------------------
GFD_PRESENT: Final = "nvidia.com/gpu.present"
GFD_COUNT: Final = "nvidia.com/gpu.count"
GFD_PRODUCT: Final = "nvidia.com/gpu.product"
GFD_MEMORY: Final = "nvidia.com/gpu.memory"  # MiB
GFD_FAMILY: Final = "nvidia.com/gpu.family"
GFD_COMPUTE_MAJOR: Final = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR: Final = "nvidia.com/gpu.compute.minor"
GFD_DRIVER_MAJOR: Final = "nvidia.com/cuda.driver.major"
GFD_DRIVER_MINOR: Final = "nvidia.com/cuda.driver.minor"
GFD_DRIVER_REV: Final = "nvidia.com/cuda.driver.rev"
GFD_RUNTIME_MAJOR: Final = "nvidia.com/cuda.runtime.major"
GFD_RUNTIME_MINOR: Final = "nvidia.com/cuda.runtime.minor"
GFD_MIG_CAPABLE: Final = "nvidia.com/mig.capable"
GFD_MIG_STRATEGY: Final = "nvidia.com/mig.strategy"


def gfd_mig_label(profile: str, what: str) -> str:
    """``nvidia.com/mig-1g.10gb.count`` and friends (GFD's mixed strategy)."""
    return f"nvidia.com/mig-{profile}.{what}"


GFD_LABELS: Final = (
    GFD_PRESENT, GFD_COUNT, GFD_PRODUCT, GFD_MEMORY, GFD_FAMILY, GFD_COMPUTE_MAJOR,
    GFD_COMPUTE_MINOR, GFD_DRIVER_MAJOR, GFD_DRIVER_MINOR, GFD_DRIVER_REV, GFD_RUNTIME_MAJOR,
    GFD_RUNTIME_MINOR, GFD_MIG_CAPABLE, GFD_MIG_STRATEGY,
)
_GFD_MIG_LABEL = re.compile(r"^nvidia\.com/mig-[0-9a-z.+]+\.(count|memory|multiprocessors)$")


def is_gfd_key(key: str) -> bool:
    """Exactly the GFD labels the agent writes: never other ``nvidia.com/`` labels, such as
    the GPU operator's ``nvidia.com/gpu.deploy.*`` or the MIG manager's
    ``nvidia.com/mig.config``."""
    return key in GFD_LABELS or bool(_GFD_MIG_LABEL.match(key))


# --------------------------------------------------------------------------------------------
# Berth's own labels and annotations.
# --------------------------------------------------------------------------------------------
LABEL_AGENT: Final = f"{DOMAIN}/gpu-agent"  # schema version; present: the agent reports here
LABEL_HEALTHY_GPUS: Final = f"{DOMAIN}/gpu.healthy-count"
LABEL_NVLINK_DOMAINS: Final = f"{DOMAIN}/nvlink.domains"  # number of NVLink domains
LABEL_NVLINK_LARGEST: Final = f"{DOMAIN}/nvlink.largest-domain"  # GPUs in the largest domain
LABEL_MIG_GPUS: Final = f"{DOMAIN}/mig.enabled-count"  # GPUs with MIG mode on

ANNOTATION_GPUS: Final = f"{DOMAIN}/gpus"  # JSON: per-GPU inventory (stable facts)
ANNOTATION_USAGE: Final = f"{DOMAIN}/gpu-usage"  # JSON: quantised utilisation and power

AGENT_LABELS: Final = (LABEL_AGENT, LABEL_HEALTHY_GPUS, LABEL_NVLINK_DOMAINS,
                       LABEL_NVLINK_LARGEST, LABEL_MIG_GPUS)
AGENT_ANNOTATIONS: Final = (ANNOTATION_GPUS, ANNOTATION_USAGE)


def is_agent_key(key: str) -> bool:
    """Keys the agent owns under Berth's domain (others there belong to other components)."""
    return key in AGENT_LABELS or key in AGENT_ANNOTATIONS


# --------------------------------------------------------------------------------------------
# Reading the per-GPU annotation back (the controller's side).
# --------------------------------------------------------------------------------------------


class NodeSchemaError(ValueError):
    """A node annotation does not follow this schema; the message names the key and field."""


def _get(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise NodeSchemaError(f"{where}.{key}: must be {kind.__name__}, got {value!r}")
    return value


def gpus_from_annotation(node: str, raw: str) -> tuple[GPU, ...]:
    """The healthy GPUs described by node ``node``'s :data:`ANNOTATION_GPUS` value, as solver
    GPUs (index, model, memory, NVLink domain, MIG slices). The agent names NVLink domains per
    node (``nvl0``); the solver needs them unique in the cluster, so they become
    ``<node>/nvl0``. GPUs the agent marked with an error are left out: they cannot take work."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NodeSchemaError(f"{ANNOTATION_GPUS}: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(data, list):
        raise NodeSchemaError(f"{ANNOTATION_GPUS}: must be a JSON list of GPUs")
    out: list[GPU] = []
    for i, g in enumerate(data):
        where = f"{ANNOTATION_GPUS}[{i}]"
        if not isinstance(g, Mapping):
            raise NodeSchemaError(f"{where}: must be an object")
        if g.get("error"):
            continue
        slices = []
        for j, m in enumerate(_get(g, "mig", list, where)):
            mw = f"{where}.mig[{j}]"
            if not isinstance(m, Mapping):
                raise NodeSchemaError(f"{mw}: must be an object")
            try:
                slices.append(MigSlice(profile=_get(m, "profile", str, mw),
                                       milli=_get(m, "milli", int, mw),
                                       memory_mib=_get(m, "memory_mib", int, mw)))
            except ProblemError as exc:
                raise NodeSchemaError(f"{mw}: {exc}") from None
        domain = g.get("nvlink_domain")
        if domain is not None and not isinstance(domain, str):
            raise NodeSchemaError(f"{where}.nvlink_domain: must be a string or null")
        try:
            out.append(GPU(index=_get(g, "index", int, where), model=_get(g, "model", str, where),
                           memory_mib=_get(g, "memory_mib", int, where),
                           nvlink_domain=None if domain is None else f"{node}/{domain}",
                           mig=tuple(slices)))
        except ProblemError as exc:
            raise NodeSchemaError(f"{where}: {exc}") from None
    return tuple(out)
