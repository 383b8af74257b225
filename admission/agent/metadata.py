"""From an inventory to the node labels and annotations that describe it (pure).

The output is deterministic (sorted JSON, quantised readings) so that the publisher can compare
it with what the node carries and patch only on a real change: a GPU's utilisation wobbles
every second, and publishing each wobble would flood the API server.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from admission.agent import schema as s
from admission.agent.inventory import GpuInfo, NodeInventory

MIG_STRATEGIES = ("none", "single", "mixed")

# Architecture by compute capability, as GFD's gpu.family label names it.
_FAMILIES = {
    (3,): "kepler", (5,): "maxwell", (6,): "pascal", (7, 0): "volta", (7, 2): "volta",
    (7, 5): "turing", (8, 0): "ampere", (8, 6): "ampere", (8, 7): "ampere",
    (8, 9): "ada-lovelace", (9,): "hopper", (10,): "blackwell", (12,): "blackwell",
}


@dataclass(frozen=True, slots=True)
class NodeMetadata:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def label_value(text: str) -> str:
    """``text`` as a valid label value: alphanumerics, '-', '_', '.', at most 63 characters,
    starting and ending alphanumeric (GFD turns "NVIDIA H100 80GB HBM3" into
    "NVIDIA-H100-80GB-HBM3" the same way)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text.strip())[:63]
    return value.strip("-_.")


def family(compute_capability: str | None) -> str | None:
    if not compute_capability:
        return None
    try:
        major, minor = (int(x) for x in compute_capability.split(".", 1))
    except ValueError:
        return None
    return _FAMILIES.get((major, minor)) or _FAMILIES.get((major,))


def infer_mig_strategy(inv: NodeInventory) -> str:
    """``none`` without MIG; ``single`` when every GPU is partitioned into one profile only;
    ``mixed`` otherwise (the device plugin's strategies, as GFD reports them)."""
    gpus = inv.healthy_gpus
    if not any(g.mig_enabled for g in gpus):
        return "none"
    profiles = {m.profile for g in gpus for m in g.mig}
    if all(g.mig_enabled for g in gpus) and len(profiles) == 1:
        return "single"
    return "mixed"


def _dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _quantise(value: float | None, step: float) -> float | None:
    if value is None:
        return None
    q = round(value / step) * step
    return int(q) if float(q).is_integer() else q


def _gfd_labels(inv: NodeInventory, strategy: str) -> dict[str, str]:
    gpus = inv.healthy_gpus
    first = gpus[0]
    labels = {
        s.GFD_PRESENT: "true",
        s.GFD_COUNT: str(len(inv.gpus)),
        s.GFD_PRODUCT: label_value(first.model),
        # The smallest GPU, so that a selector on memory never promises more than any GPU has.
        s.GFD_MEMORY: str(min(g.memory_mib for g in gpus)),
        s.GFD_MIG_CAPABLE: "true" if any(g.mig_capable for g in gpus) else "false",
        s.GFD_MIG_STRATEGY: strategy,
    }
    fam = family(first.compute_capability)
    if fam:
        labels[s.GFD_FAMILY] = fam
    if first.compute_capability:
        major, _, minor = first.compute_capability.partition(".")
        labels[s.GFD_COMPUTE_MAJOR], labels[s.GFD_COMPUTE_MINOR] = major, minor
    if inv.driver_version:
        parts = inv.driver_version.split(".")
        keys = (s.GFD_DRIVER_MAJOR, s.GFD_DRIVER_MINOR, s.GFD_DRIVER_REV)
        labels.update({k: label_value(v) for k, v in zip(keys, parts, strict=False) if v})
    if inv.cuda_driver_version:
        major, _, minor = inv.cuda_driver_version.partition(".")
        labels[s.GFD_RUNTIME_MAJOR], labels[s.GFD_RUNTIME_MINOR] = major, minor
    instances = [m for g in gpus for m in g.mig]
    if strategy == "single" and instances:
        # GFD's single strategy: the MIG device is what nvidia.com/gpu counts.
        profile = instances[0].profile
        labels[s.GFD_PRODUCT] = label_value(f"{first.model}-MIG-{profile}")
        labels[s.GFD_COUNT] = str(len(instances))
        labels[s.GFD_MEMORY] = str(min(m.memory_mib for m in instances))
    elif strategy == "mixed":
        counts = Counter(m.profile for m in instances)
        for profile, n in counts.items():
            memory = min(m.memory_mib for m in instances if m.profile == profile)
            sms = min(m.multiprocessors for m in instances if m.profile == profile)
            labels[s.gfd_mig_label(profile, "count")] = str(n)
            labels[s.gfd_mig_label(profile, "memory")] = str(memory)
            labels[s.gfd_mig_label(profile, "multiprocessors")] = str(sms)
    return labels


def _gpu_record(g: GpuInfo) -> dict[str, Any]:
    # Only facts that change when the hardware or its configuration changes, never readings.
    return {
        "index": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "memory_mib": g.memory_mib,
        "pci_bus_id": g.pci_bus_id,
        "numa_node": g.numa_node,
        "compute_capability": g.compute_capability,
        "mig_enabled": g.mig_enabled,
        "mig": [
            {"profile": m.profile, "uuid": m.uuid, "gpu_instance_id": m.gpu_instance_id,
             "memory_mib": m.memory_mib, "milli": m.milli}
            for m in g.mig
        ],
        "nvlink_domain": g.nvlink_domain,
        "nvlink_links": g.nvlink_links,
        "nvlink_gpu_peers": list(g.nvlink_gpu_peers),
        "power_limit_w": g.power_limit_w,
        "error": g.error,
    }


def _usage(inv: NodeInventory, util_step_pct: int, power_step_w: int) -> list[dict[str, Any]]:
    rows = []
    for g in inv.healthy_gpus:
        row = {
            "index": g.index,
            "sm_pct": _quantise(g.utilisation_sm_pct, util_step_pct),
            "membw_pct": _quantise(g.utilisation_membw_pct, util_step_pct),
            "power_w": _quantise(g.power_draw_w, power_step_w),
        }
        if any(v is not None for k, v in row.items() if k != "index"):
            rows.append(row)
    return rows


def to_node_metadata(
    inv: NodeInventory,
    *,
    gfd_labels: bool = True,
    mig_strategy: str | None = None,
    usage: bool = True,
    util_step_pct: int = 10,
    power_step_w: int = 25,
) -> NodeMetadata:
    """Labels and annotations for ``inv`` (schema in docs/node-labels.md).

    ``gfd_labels``: also write GPU Feature Discovery's ``nvidia.com/`` labels (turn off where
    GFD itself runs, so that one writer owns them). ``mig_strategy``: the device plugin's MIG
    strategy, inferred from the layout when None. ``usage``: publish quantised utilisation and
    power (``util_step_pct`` percent, ``power_step_w`` watts) for profile refinement.
    """
    if mig_strategy is not None and mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"mig_strategy must be one of {', '.join(MIG_STRATEGIES)}")
    if util_step_pct <= 0 or power_step_w <= 0:
        raise ValueError("util_step_pct and power_step_w must be > 0")
    healthy = inv.healthy_gpus
    domains = Counter(g.nvlink_domain for g in healthy if g.nvlink_domain is not None)
    labels = {
        s.LABEL_AGENT: s.SCHEMA_VERSION,
        s.LABEL_HEALTHY_GPUS: str(len(healthy)),
        s.LABEL_NVLINK_DOMAINS: str(len(domains)),
        s.LABEL_NVLINK_LARGEST: str(max(domains.values(), default=0)),
        s.LABEL_MIG_GPUS: str(sum(1 for g in healthy if g.mig_enabled)),
    }
    if gfd_labels and healthy:
        labels.update(_gfd_labels(inv, mig_strategy or infer_mig_strategy(inv)))
    annotations = {s.ANNOTATION_GPUS: _dumps([_gpu_record(g) for g in inv.gpus])}
    if usage:
        rows = _usage(inv, util_step_pct, power_step_w)
        if rows:
            annotations[s.ANNOTATION_USAGE] = _dumps(rows)
    return NodeMetadata(labels=labels, annotations=annotations)
