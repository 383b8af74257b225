"""What the GPUs of this machine are, read through NVML into plain, comparable dataclasses.

``nvml`` is passed in: the ``pynvml`` module from the nvidia-ml-py distribution in production,
a fake with the same function names and error semantics in tests. Queries a GPU does not
support (``NVML_ERROR_NOT_SUPPORTED``, or a function the installed driver lacks) leave the field
as None; any other error on a GPU marks that GPU with ``error`` instead of hiding it, so the
controller can leave it out and an operator can see why.

The JSON form (:func:`inventory_to_dict`) is what ``berth agent --once --print --json`` prints.
Its format is versioned (:data:`FORMAT`) and stable, so the output of a real machine can be kept
as a test fixture and read back with :func:`inventory_from_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from admission.agent.topology import normalise_bus_id, nvlink_domains

FORMAT = "berth-agent-inventory/v1"
MIB = 1 << 20

T = TypeVar("T")


class NvmlUnavailable(RuntimeError):
    """NVIDIA's management library or driver is not usable on this machine."""


class InventoryFormatError(ValueError):
    """A stored inventory does not follow :data:`FORMAT`; the message names the field."""


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device: ``milli`` is its share of the parent's compute slices (1000 = all)."""

    profile: str  # "1g.10gb", or "1c.3g.40gb" when the compute instance is smaller
    uuid: str
    gpu_instance_id: int | None
    memory_mib: int
    multiprocessors: int
    milli: int


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str
    model: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None = None
    compute_capability: str | None = None  # "9.0"
    mig_capable: bool = False
    mig_enabled: bool = False
    mig: tuple[MigInstance, ...] = ()
    nvlink_links: int = 0  # active links
    nvlink_gpu_peers: tuple[int, ...] = ()  # indexes of GPUs linked directly, without a switch
    nvlink_switch_links: int = 0  # active links that end at an NVSwitch
    nvlink_domain: str | None = None  # node-local id, "nvl0", "nvl1", ...; None: PCIe only
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    utilisation_sm_pct: int | None = None  # share of time a kernel ran (NVML utilization.gpu)
    utilisation_membw_pct: int | None = None  # share of time memory was busy
    error: str | None = None  # set when the GPU could not be read (e.g. "GPU is lost")


@dataclass(frozen=True, slots=True)
class NodeInventory:
    driver_version: str | None
    cuda_driver_version: str | None  # "12.4"
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    @property
    def healthy_gpus(self) -> tuple[GpuInfo, ...]:
        return tuple(g for g in self.gpus if g.error is None)


# --------------------------------------------------------------------------------------------
# Reading NVML
# --------------------------------------------------------------------------------------------


def _absent_codes(nvml: Any) -> frozenset[int]:
    # A query the GPU or the installed driver cannot answer is absent data, not a failure.
    return frozenset(
        getattr(nvml, name)
        for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
        if hasattr(nvml, name)
    )


def _optional(nvml: Any, fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) in _absent_codes(nvml):
            return None
        raise


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def nvml_session(nvml: Any) -> Iterator[Any]:
    """``nvmlInit`` ... ``nvmlShutdown``, turning a missing library or driver into
    :class:`NvmlUnavailable` with a message a person can act on."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(
            f"NVIDIA's management library (NVML) is not usable on this machine: {exc}"
        ) from None
    except OSError as exc:  # a broken libnvidia-ml.so can fail in the dynamic loader
        raise NvmlUnavailable(f"NVIDIA's management library could not be loaded: {exc}") from None
    try:
        yield nvml
    finally:
        with suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _mig_profile(gi_slices: int, ci_slices: int, memory_mib: int) -> str:
    # NVIDIA names MIG profiles by compute slices and memory rounded up to whole GB.
    gb = max(1, math.ceil(memory_mib / 1024))
    if ci_slices and ci_slices != gi_slices:
        return f"{ci_slices}c.{gi_slices}g.{gb}gb"
    return f"{gi_slices}g.{gb}gb"


def _read_mig(nvml: Any, handle: Any) -> tuple[bool, bool, tuple[MigInstance, ...]]:
    """(capable, enabled, instances) of one GPU."""
    mode = _optional(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if mode is None:
        return False, False, ()
    enabled = int(mode[0]) == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    if not enabled:
        return True, False, ()
    slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    instances: list[MigInstance] = []
    for i in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_NOT_FOUND:  # no MIG device in this slot
                continue
            raise
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        gi_slices = int(attrs.gpuInstanceSliceCount)
        ci_slices = int(attrs.computeInstanceSliceCount)
        memory = int(attrs.memorySizeMB)
        instances.append(
            MigInstance(
                profile=_mig_profile(gi_slices, ci_slices, memory),
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                gpu_instance_id=_optional(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig),
                memory_mib=memory,
                multiprocessors=int(attrs.multiprocessorCount),
                milli=max(1, min(1000, 1000 * (ci_slices or gi_slices) // max(1, slots))),
            )
        )
    return True, True, tuple(instances)


@dataclass(slots=True)
class _Links:
    remotes: list[str] = field(default_factory=list)  # bus ids at the far end of active links
    gpu_remotes: list[str] = field(default_factory=list)
    switch_links: int = 0


def _read_links(nvml: Any, handle: Any) -> _Links:
    out = _Links()
    gpu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            active = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as exc:
            if exc.value in _absent_codes(nvml):  # no NVLink on this GPU at all
                break
            if exc.value == nvml.NVML_ERROR_INVALID_ARGUMENT:  # past this GPU's last link
                break
            raise
        if not active:
            continue
        remote = normalise_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        kind = _optional(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        out.remotes.append(remote)
        if kind == switch_type:
            out.switch_links += 1
        elif kind == gpu_type:
            out.gpu_remotes.append(remote)
    return out


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000.0, 1)


def _read_gpu(nvml: Any, index: int) -> tuple[GpuInfo, _Links]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    bus_id = normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
    cc = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    capable, enabled, instances = _read_mig(nvml, handle)
    power = _optional(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _optional(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    util = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    links = _read_links(nvml, handle)
    info = GpuInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
        pci_bus_id=bus_id,
        numa_node=_optional(nvml, nvml.nvmlDeviceGetNumaNodeId, handle),
        compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
        mig_capable=capable,
        mig_enabled=enabled,
        mig=instances,
        nvlink_links=len(links.remotes),
        nvlink_switch_links=links.switch_links,
        power_draw_w=_watts(power),
        power_limit_w=_watts(limit),
        utilisation_sm_pct=None if util is None else int(util.gpu),
        utilisation_membw_pct=None if util is None else int(util.memory),
    )
    return info, links


def _cuda_version(raw: int | None) -> str | None:
    # NVML encodes CUDA 12.4 as 12040.
    return None if raw is None else f"{raw // 1000}.{(raw % 1000) // 10}"


def read_inventory(nvml: Any) -> NodeInventory:
    """Everything the agent publishes, from an initialised NVML (see :func:`nvml_session`)."""
    driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion)
    cuda = _optional(nvml, nvml.nvmlSystemGetCudaDriverVersion)
    gpus: list[GpuInfo] = []
    links: dict[str, _Links] = {}
    for index in range(int(nvml.nvmlDeviceGetCount())):
        try:
            info, gpu_links = _read_gpu(nvml, index)
        except nvml.NVMLError as exc:
            gpus.append(
                GpuInfo(index=index, uuid="", model="unknown", memory_mib=0, pci_bus_id="",
                        error=str(exc) or f"NVML error {getattr(exc, 'value', '?')}")
            )
            continue
        gpus.append(info)
        links[info.pci_bus_id] = gpu_links
    return NodeInventory(
        driver_version=None if driver is None else _text(driver),
        cuda_driver_version=_cuda_version(cuda),
        gpus=_with_domains(gpus, links),
    )


def _with_domains(gpus: list[GpuInfo], links: Mapping[str, _Links]) -> tuple[GpuInfo, ...]:
    """Fill in each GPU's direct peers and its NVLink domain (named by order of first GPU)."""
    index_of = {g.pci_bus_id: g.index for g in gpus if g.error is None}
    domains = nvlink_domains({bus: lk.remotes for bus, lk in links.items()})
    ordered = sorted(domains, key=lambda d: min(index_of[b] for b in d))
    domain_of = {bus: f"nvl{i}" for i, d in enumerate(ordered) for bus in d}
    out = []
    for g in gpus:
        if g.error is not None:
            out.append(g)
            continue
        lk = links[g.pci_bus_id]
        peers = tuple(sorted({index_of[r] for r in lk.gpu_remotes if r in index_of}))
        out.append(replace(g, nvlink_gpu_peers=peers, nvlink_domain=domain_of.get(g.pci_bus_id)))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# The stable JSON form
# --------------------------------------------------------------------------------------------


def inventory_to_dict(inv: NodeInventory) -> dict[str, Any]:
    """The inventory as JSON-ready data in :data:`FORMAT` (keys fixed; lists, not tuples)."""
    return {
        "format": FORMAT,
        "driver_version": inv.driver_version,
        "cuda_driver_version": inv.cuda_driver_version,
        "gpus": [
            {**asdict(g), "mig": [asdict(m) for m in g.mig],
             "nvlink_gpu_peers": list(g.nvlink_gpu_peers)}
            for g in inv.gpus
        ],
    }


def _field(obj: Mapping[str, Any], key: str, kinds: tuple[type, ...], path: str) -> Any:
    if key not in obj:
        raise InventoryFormatError(f"{path}.{key}: missing")
    value = obj[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise InventoryFormatError(f"{path}.{key}: must be {names}, got {value!r}")
    return value


_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_NUM = (int, float, type(None))


def _int_tuple(values: list[Any], path: str) -> tuple[int, ...]:
    for i, v in enumerate(values):
        if not isinstance(v, int) or isinstance(v, bool):
            raise InventoryFormatError(f"{path}[{i}]: must be int, got {v!r}")
    return tuple(values)


def _gpu_from_dict(d: Any, path: str) -> GpuInfo:
    if not isinstance(d, Mapping):
        raise InventoryFormatError(f"{path}: must be an object")
    migs = _field(d, "mig", (list,), path)
    return GpuInfo(
        index=_field(d, "index", (int,), path),
        uuid=_field(d, "uuid", (str,), path),
        model=_field(d, "model", (str,), path),
        memory_mib=_field(d, "memory_mib", (int,), path),
        pci_bus_id=_field(d, "pci_bus_id", (str,), path),
        numa_node=_field(d, "numa_node", _OPT_INT, path),
        compute_capability=_field(d, "compute_capability", _OPT_STR, path),
        mig_capable=_field(d, "mig_capable", (bool,), path),
        mig_enabled=_field(d, "mig_enabled", (bool,), path),
        mig=tuple(_mig_from_dict(m, f"{path}.mig[{i}]") for i, m in enumerate(migs)),
        nvlink_links=_field(d, "nvlink_links", (int,), path),
        nvlink_gpu_peers=_int_tuple(_field(d, "nvlink_gpu_peers", (list,), path),
                                    f"{path}.nvlink_gpu_peers"),
        nvlink_switch_links=_field(d, "nvlink_switch_links", (int,), path),
        nvlink_domain=_field(d, "nvlink_domain", _OPT_STR, path),
        power_draw_w=_field(d, "power_draw_w", _OPT_NUM, path),
        power_limit_w=_field(d, "power_limit_w", _OPT_NUM, path),
        utilisation_sm_pct=_field(d, "utilisation_sm_pct", _OPT_INT, path),
        utilisation_membw_pct=_field(d, "utilisation_membw_pct", _OPT_INT, path),
        error=_field(d, "error", _OPT_STR, path),
    )


def _mig_from_dict(d: Any, path: str) -> MigInstance:
    if not isinstance(d, Mapping):
        raise InventoryFormatError(f"{path}: must be an object")
    return MigInstance(
        profile=_field(d, "profile", (str,), path),
        uuid=_field(d, "uuid", (str,), path),
        gpu_instance_id=_field(d, "gpu_instance_id", _OPT_INT, path),
        memory_mib=_field(d, "memory_mib", (int,), path),
        multiprocessors=_field(d, "multiprocessors", (int,), path),
        milli=_field(d, "milli", (int,), path),
    )


def inventory_from_dict(data: Any) -> NodeInventory:
    """Read back :func:`inventory_to_dict`'s output; :class:`InventoryFormatError` names the
    first field that does not fit. Used by the tests only (the round trip that pins the
    format)."""
    if not isinstance(data, Mapping):
        raise InventoryFormatError("inventory: must be a JSON object")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise InventoryFormatError(f"inventory.format: expected {FORMAT!r}, got {fmt!r}")
    gpus = _field(data, "gpus", (list,), "inventory")
    return NodeInventory(
        driver_version=_field(data, "driver_version", _OPT_STR, "inventory"),
        cuda_driver_version=_field(data, "cuda_driver_version", _OPT_STR, "inventory"),
        gpus=tuple(_gpu_from_dict(g, f"inventory.gpus[{i}]") for i, g in enumerate(gpus)),
    )
