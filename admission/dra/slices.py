"""GPUs and MIG devices as nodes publish them in ResourceSlices, and the devices claims hold.

A DRA driver publishes each node's devices in ResourceSlices (``spec.driver``,
``spec.nodeName``, ``spec.pool`` with a generation, ``spec.devices``). Berth reads the slices
of the GPU driver (:data:`admission.constants.DRA_DRIVER`) that name one node:

- a device whose ``type`` attribute is ``gpu`` is a whole GPU: its model from ``productName``,
  its memory from the ``memory`` capacity, its NVLink domain from a ``clique`` attribute
  (else the node's ``nvidia.com/gpu.clique`` label, as the caller passes it); one with
  ``allowMultipleAllocations: true`` may be shared by claims that ask for part of its memory
  (consumable capacity), rounded up by the memory's ``requestPolicy`` as the scheduler does;
- a device whose ``type`` is ``mig`` is a MIG device of the GPU its ``parentUUID`` names
  (``profile``, ``memory``); MIG devices of a GPU the slices do not list as a whole GPU (a
  GPU in MIG mode is published as its MIG devices only) make one GPU of their parent.

Only the newest generation of a pool counts, as the scheduler's allocator does. A slice that
cannot be read is skipped and named in :attr:`NodeDevices.problems`: one bad slice must not
hide a node's other GPUs. Pure: slices and claims come in as API JSON.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from admission import constants as c

Obj = Mapping[str, Any]

_QUANTITY = re.compile(r"([0-9]{1,15})(Ki|Mi|Gi|Ti|k|M|G|T)?")
_SCALE = {None: 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4,
          "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
_MIG_PROFILE = re.compile(r"([1-7])g\.([0-9]{1,4})gb(?:\+.*)?")
MIB = 1024 ** 2
MIG_PARENT = "mig-parent:"  # the name prefix of a GPU known only by its MIG devices
MIG_COMPUTE_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100, H200, B200)


@dataclass(frozen=True, slots=True)
class Device:
    """One device of the GPU driver on a node."""

    name: str  # the device's name in its slice (gpu-0, gpu-0-mig-1g.10gb-0-0, ...)
    pool: str
    kind: str  # "gpu" or "mig"
    model: str
    memory_mib: int = 0
    uuid: str = ""
    parent: str = ""  # MIG: the parent GPU's uuid
    profile: str = ""  # MIG: the profile (1g.10gb)
    clique: str | None = None
    shared: bool = False  # allowMultipleAllocations: claims share it by its memory
    # the memory's requestPolicy, MiB: valid values (ascending), or (min, max, step), 0: unset
    valid_values: tuple[int, ...] = ()
    valid_range: tuple[int, int, int] | None = None

    def consumed_mib(self, mib: int) -> int | None:
        """The memory a claim asking for ``mib`` consumes of this shared device, after the
        request policy; None when the policy (or the device's memory) cannot grant it."""
        if self.valid_values:
            return next((v for v in self.valid_values if v >= mib), None)
        if self.valid_range is not None:
            low, high, step = self.valid_range
            mib = max(mib, low)
            if step:
                mib = low + -(-(mib - low) // step) * step
            if high and mib > high:
                return None
        return mib if not self.memory_mib or mib <= self.memory_mib else None


@dataclass(slots=True)
class NodeDevices:
    """The GPU driver's devices on one node; ``gpus`` in a stable order (their index is the
    position, after the node's device-plugin GPUs)."""

    gpus: list[Device] = field(default_factory=list)
    mig: dict[str, list[Device]] = field(default_factory=dict)  # parent uuid -> devices
    problems: list[str] = field(default_factory=list)


def _attr(device: Obj, name: str, driver: str) -> object:
    attrs = device.get("attributes") or {}
    if not isinstance(attrs, dict):
        return None
    value = attrs.get(name, attrs.get(f"{driver}/{name}"))
    if not isinstance(value, dict):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def model_name(product: str) -> str:
    """A productName as GPU Feature Discovery writes it in ``nvidia.com/gpu.product`` (spaces
    become dashes: ``NVIDIA A100-SXM4-80GB`` is ``NVIDIA-A100-SXM4-80GB``), so one policy's
    model names hold for device-plugin and DRA GPUs alike."""
    return "-".join(product.split())


def quantity_mib(raw: object, *, up: bool = False) -> int:
    """MiB in a capacity quantity (``80Gi``, ``85899345920``), rounded down (``up``: up);
    0 when unreadable."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        value = raw
    elif isinstance(raw, str) and (m := _QUANTITY.fullmatch(raw)):
        value = int(m.group(1)) * _SCALE[m.group(2)]
    else:
        return 0
    return -(-value // MIB) if up else value // MIB


def _memory(device: Obj) -> int:
    mem = _memory_capacity(device)
    return quantity_mib(mem.get("value"))


def _memory_capacity(device: Obj) -> Obj:
    cap = device.get("capacity") or {}
    mem = cap.get("memory") if isinstance(cap, dict) else None
    return mem if isinstance(mem, dict) else {}


def _policy(device: Obj) -> tuple[tuple[int, ...], tuple[int, int, int] | None]:
    """The memory capacity's request policy in MiB: (valid values, (min, max, step))."""
    policy = _memory_capacity(device).get("requestPolicy")
    if not isinstance(policy, dict):
        return (), None
    values = policy.get("validValues")
    if isinstance(values, list) and values:
        return tuple(sorted(quantity_mib(v, up=True) for v in values)), None
    span = policy.get("validRange")
    if isinstance(span, dict):
        return (), (quantity_mib(span.get("min"), up=True), quantity_mib(span.get("max")),
                    quantity_mib(span.get("step"), up=True))
    return (), None


def mig_milli(profile: str) -> int:
    """A MIG profile's share of its GPU's compute in milli (``3g.40gb`` -> 429); 0 when the
    profile is not of the ``<n>g.<m>gb`` form."""
    m = _MIG_PROFILE.fullmatch(profile)
    return round(int(m.group(1)) * 1000 / MIG_COMPUTE_SLICES) if m else 0


def newest_pools(slices: Iterable[Obj], driver: str = c.DRA_DRIVER) -> list[Obj]:
    """The driver's slices of the newest generation of each pool."""
    mine: list[Obj] = [s for s in slices if isinstance(s, dict)
            and isinstance(s.get("spec"), dict) and s["spec"].get("driver") == driver]
    newest: dict[str, int] = {}
    for s in mine:
        pool = s["spec"].get("pool") or {}
        gen = pool.get("generation") if isinstance(pool, dict) else None
        name = str(pool.get("name") or "") if isinstance(pool, dict) else ""
        gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
        newest[name] = max(newest.get(name, gen), gen)
    out: list[Obj] = []
    for s in mine:
        pool = s["spec"].get("pool") or {}
        name = str(pool.get("name") or "") if isinstance(pool, dict) else ""
        gen = pool.get("generation") if isinstance(pool, dict) else 0
        if (gen if isinstance(gen, int) else 0) == newest.get(name, 0):
            out.append(s)
    return out


def node_devices(slices: Iterable[Obj], driver: str = c.DRA_DRIVER) -> dict[str, NodeDevices]:
    """Per node name, the GPU driver's devices published for it."""
    out: dict[str, NodeDevices] = defaultdict(NodeDevices)
    seen: set[tuple[str, str]] = set()
    for s in newest_pools(slices, driver):
        spec = s["spec"]
        node = spec.get("nodeName")
        sname = str((s.get("metadata") or {}).get("name") or "?")
        if not isinstance(node, str) or not node:
            continue  # network-attached devices: not a node's GPUs
        pool = spec.get("pool") or {}
        pool_name = str(pool.get("name") or "") if isinstance(pool, dict) else ""
        devices = spec.get("devices") or []
        if not isinstance(devices, list):
            out[node].problems.append(f"ResourceSlice {sname}: spec.devices is not a list")
            continue
        entry = out[node]
        for i, dev in enumerate(devices):
            if not isinstance(dev, dict) or not isinstance(dev.get("name"), str):
                entry.problems.append(f"ResourceSlice {sname}: spec.devices[{i}] has no name")
                continue
            if (pool_name, dev["name"]) in seen:
                continue
            seen.add((pool_name, dev["name"]))
            kind = _attr(dev, "type", driver)
            model = _attr(dev, "productName", driver)
            if kind not in ("gpu", "mig"):
                continue
            if not isinstance(model, str) or not model:
                entry.problems.append(f"ResourceSlice {sname}: device {dev['name']} has no "
                                      "productName")
                continue
            uuid = _attr(dev, "uuid", driver)
            clique = _attr(dev, "clique", driver)
            d = Device(name=dev["name"], pool=pool_name, kind=str(kind), model=model_name(model),
                       memory_mib=_memory(dev), uuid=uuid if isinstance(uuid, str) else "",
                       clique=clique if isinstance(clique, str) and clique else None)
            if kind == "gpu":
                if dev.get("allowMultipleAllocations") is True and d.memory_mib:
                    values, span = _policy(dev)
                    d = replace(d, shared=True, valid_values=values, valid_range=span)
                entry.gpus.append(d)
            else:
                parent = _attr(dev, "parentUUID", driver)
                profile = _attr(dev, "profile", driver)
                d = Device(name=d.name, pool=d.pool, kind="mig", model=d.model,
                           memory_mib=d.memory_mib, uuid=d.uuid,
                           parent=parent if isinstance(parent, str) else "",
                           profile=profile if isinstance(profile, str) else "", clique=d.clique)
                entry.mig.setdefault(d.parent or d.name, []).append(d)
    for entry in out.values():
        entry.gpus.sort(key=lambda d: _natural(d.name))
        known = {g.uuid for g in entry.gpus if g.uuid}
        for parent, migs in sorted(entry.mig.items()):
            migs.sort(key=lambda d: _natural(d.name))
            if parent not in known:  # a GPU in MIG mode: its MIG devices only
                first = migs[0]
                entry.gpus.append(Device(name=f"{MIG_PARENT}{parent}", pool=first.pool, kind="gpu",
                                         model=first.model, uuid=parent, clique=first.clique))
    return dict(out)


def _natural(name: str) -> tuple[Any, ...]:
    """gpu-2 before gpu-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", name))


@dataclass(frozen=True, slots=True)
class Allocated:
    """A device a claim holds: ``(driver, pool, device)`` as the allocation names it, the
    claim's request it was allocated for, and the memory it consumes of a shared device
    (``consumedCapacity``; 0 when not recorded)."""

    driver: str
    pool: str
    device: str
    request: str = ""
    consumed_mib: int = 0


def claim_devices(claim: Obj, driver: str = c.DRA_DRIVER) -> list[Allocated]:
    """The GPU driver's devices an allocated claim holds (``status.allocation``)."""
    alloc = ((claim.get("status") or {}).get("allocation") or {})
    results = ((alloc.get("devices") or {}) if isinstance(alloc, dict) else {}).get("results")
    out = []
    for r in results or []:
        if isinstance(r, dict) and r.get("driver") == driver and isinstance(r.get("device"), str):
            consumed = r.get("consumedCapacity")
            mib = quantity_mib(consumed.get("memory"), up=True) if isinstance(consumed, dict) else 0
            out.append(Allocated(driver, str(r.get("pool") or ""), r["device"],
                                 str(r.get("request") or ""), mib))
    return out


def reserved_for(claim: Obj) -> list[str]:
    """Uids of the pods a claim is reserved for (``status.reservedFor``)."""
    return [str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or []
            if isinstance(r, dict) and r.get("resource") == "pods" and r.get("uid")]
