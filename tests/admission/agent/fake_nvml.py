"""A fake NVML that behaves like pynvml on the machines Berth meets, for the agent's tests.

It implements the subset of the pynvml API the agent calls, with the same function names,
return shapes (ctypes-like structures with ``busId`` as bytes, memory in bytes, power in
milliwatts, CUDA version as 12040) and error semantics: it raises pynvml's own ``NVMLError``
with NVML's codes -- ``NVML_ERROR_UNINITIALIZED`` before ``nvmlInit``,
``NVML_ERROR_NOT_SUPPORTED`` for queries the device cannot answer (NVLink on a PCIe card, MIG on
a GPU without it, utilisation of a MIG-enabled GPU), ``NVML_ERROR_INVALID_ARGUMENT`` past a
GPU's last NVLink, ``NVML_ERROR_NOT_FOUND`` for an empty MIG slot, ``NVML_ERROR_GPU_IS_LOST``
for a fallen-off GPU and ``NVML_ERROR_LIBRARY_NOT_FOUND`` where there is no driver.

The machines below follow public specifications of the hardware (names as NVML reports them,
memory sizes, link counts, MIG profiles); they are not recordings of real devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

NVMLError = pynvml.NVMLError
GIB = 1 << 30


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeMig:
    gi_slices: int
    memory_mb: int
    sms: int
    uuid: str
    gi_id: int
    ci_slices: int | None = None


@dataclass
class FakeGpu:
    name: str
    uuid: str
    memory_bytes: int
    bus_id: str
    cc: tuple[int, int]
    numa: int | None = 0  # None: NOT_SUPPORTED
    numa_missing: bool = False  # an old driver without nvmlDeviceGetNumaNodeId
    mig_mode: int | None = None  # None: the GPU has no MIG
    max_mig: int = 7
    migs: list[FakeMig] = field(default_factory=list)
    max_links: int = 0  # 0: no NVLink at all
    links: dict[int, tuple[str, int]] = field(default_factory=dict)  # link -> (remote, type)
    power_mw: int | None = 300_000
    limit_mw: int | None = 700_000
    util: tuple[int, int] = (40, 20)
    lost: bool = False


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


class FakeNvml:
    """Stands in for the ``pynvml`` module; constants and the error class are pynvml's own."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "550.54.15", cuda: int = 12040,
                 library: bool = True) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.library = library
        self.initialised = False
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):  # every constant exactly as pynvml defines it
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- library -------------------------------------------------------------------------
    def _ready(self, fn: str) -> None:
        self.calls.append(fn)
        if not self.initialised:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if not self.library:
            raise _err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._ready("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._ready("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._ready("nvmlDeviceGetCount")
        return len(self.gpus)

    # -- devices -------------------------------------------------------------------------
    def _gpu(self, fn: str, handle: _Handle, *, mig_ok: bool = False) -> FakeGpu:
        self._ready(fn)
        if not isinstance(handle, _Handle) or not 0 <= handle.gpu < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.mig is not None and not mig_ok:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu = self.gpus[handle.gpu]
        if gpu.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", handle, mig_ok=True)
        return gpu.uuid if handle.mig is None else gpu.migs[handle.mig].uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle, mig_ok=True).name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=gpu.memory_bytes, free=gpu.memory_bytes // 2,
                               used=gpu.memory_bytes - gpu.memory_bytes // 2)

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=gpu.bus_id.encode(), busIdLegacy=gpu.bus_id[4:].encode())

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", handle, mig_ok=True).cc

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetNumaNodeId", handle)
        if gpu.numa_missing:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if gpu.numa is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.numa

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetPowerUsage", handle)
        if gpu.power_mw is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        if gpu.limit_mw is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.limit_mw

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:  # NVML has no GPU-wide reading then
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    # -- MIG -------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle)
        if gpu.mig_mode is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return gpu.max_mig if gpu.mig_mode is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < gpu.max_mig:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.migs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetAttributes", handle, mig_ok=True)
        if handle.mig is None:
            return SimpleNamespace(multiprocessorCount=132, gpuInstanceSliceCount=0,
                                   computeInstanceSliceCount=0,
                                   memorySizeMB=gpu.memory_bytes >> 20)
        m = gpu.migs[handle.mig]
        return SimpleNamespace(multiprocessorCount=m.sms, gpuInstanceSliceCount=m.gi_slices,
                               computeInstanceSliceCount=m.ci_slices or m.gi_slices,
                               memorySizeMB=m.memory_mb)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceId", handle, mig_ok=True)
        if handle.mig is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.migs[handle.mig].gi_id

    # -- NVLink ----------------------------------------------------------------------------
    def _link(self, fn: str, handle: _Handle, link: int) -> FakeGpu:
        gpu = self._gpu(fn, handle)
        if gpu.max_links == 0:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < gpu.max_links:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkState", handle, link)
        return pynvml.NVML_FEATURE_ENABLED if link in gpu.links else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Handle, link: int) -> Any:
        gpu = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if link not in gpu.links:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        remote = gpu.links[link][0]
        return SimpleNamespace(busId=remote.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        gpu = self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if link not in gpu.links:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.links[link][1]


# --------------------------------------------------------------------------------------------
# Machines
# --------------------------------------------------------------------------------------------

SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


def _uuid(tag: str, i: int) -> str:
    return f"GPU-{tag}{i:02d}0000-0000-0000-0000-000000000000"[:40]


def hgx_h100() -> FakeNvml:
    """8 x H100 SXM5 80GB on an HGX board: 18 NVLinks each, all to the 4 NVSwitches."""
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    switches = [f"00000000:{b}:00.0" for b in ("05", "06", "07", "08")]
    gpus = [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3", uuid=_uuid("h100", i), memory_bytes=85_520_809_984,
            bus_id=f"00000000:{b}:00.0", cc=(9, 0), numa=0 if i < 4 else 1, mig_mode=0,
            max_links=18, links={link: (switches[link % 4], SWITCH) for link in range(18)},
            power_mw=312_000 + 1000 * i, limit_mw=700_000, util=(43, 21),
        )
        for i, b in enumerate(buses)
    ]
    return FakeNvml(gpus)


def a100_mig() -> FakeNvml:
    """4 x A100 SXM4 80GB behind NVSwitches; GPU 0 split 4 x 1g.10gb + 1 x 3g.40gb, GPU 1
    split 2 x 3g.40gb, GPUs 2 and 3 with MIG off."""
    switches = [f"00000000:{b}:00.0" for b in ("c0", "c1", "c2", "c3", "c4", "c5")]

    def one_g(i: int, gi: int) -> FakeMig:
        return FakeMig(gi_slices=1, memory_mb=9_728, sms=14, uuid=f"MIG-1g-{i}", gi_id=gi)

    def three_g(i: int, gi: int) -> FakeMig:
        return FakeMig(gi_slices=3, memory_mb=40_192, sms=42, uuid=f"MIG-3g-{i}", gi_id=gi)

    layouts = [
        (1, [one_g(0, 9), one_g(1, 10), one_g(2, 11), one_g(3, 12), three_g(0, 2)]),
        (1, [three_g(1, 1), three_g(2, 2)]),
        (0, []),
        (0, []),
    ]
    gpus = [
        FakeGpu(
            name="NVIDIA A100-SXM4-80GB", uuid=_uuid("a100", i), memory_bytes=85_899_345_920,
            bus_id=f"00000000:{b}:00.0", cc=(8, 0), mig_mode=mode, migs=migs, max_links=12,
            links={link: (switches[link % 6], SWITCH) for link in range(12)}, limit_mw=400_000,
        )
        for i, (b, (mode, migs)) in enumerate(zip(["07", "0f", "47", "4e"], layouts, strict=True))
    ]
    return FakeNvml(gpus, driver="535.161.08", cuda=12020)


def pcie_l4() -> FakeNvml:
    """4 x L4 on PCIe: no NVLink, no MIG, and a driver too old to report NUMA affinity."""
    gpus = [
        FakeGpu(
            name="NVIDIA L4", uuid=_uuid("l4", i), memory_bytes=24_152_899_584,
            bus_id=f"00000000:{b}:00.0", cc=(8, 9), numa_missing=True, limit_mw=72_000,
            power_mw=16_000, util=(0, 0),
        )
        for i, b in enumerate(["01", "02", "81", "82"])
    ]
    return FakeNvml(gpus, driver="470.223.02", cuda=11040)


def two_islands() -> FakeNvml:
    """8 x V100 SXM2 32GB in two islands of 4 fully linked GPUs (2 links per pair, 6 per
    GPU), no NVSwitch, no link between the islands."""
    buses = [f"00000000:{b}:00.0" for b in ("15", "16", "3a", "3b", "89", "8a", "b2", "b3")]
    gpus = []
    for i, bus in enumerate(buses):
        island = range(0, 4) if i < 4 else range(4, 8)
        peers = [j for j in island if j != i]
        links = {2 * k + r: (buses[p], GPU) for k, p in enumerate(peers) for r in range(2)}
        gpus.append(FakeGpu(
            name="Tesla V100-SXM2-32GB", uuid=_uuid("v100", i), memory_bytes=34_089_730_048,
            bus_id=bus, cc=(7, 0), numa=i // 4, max_links=6, links=links, limit_mw=300_000,
        ))
    return FakeNvml(gpus, driver="535.183.01", cuda=12020)


MACHINES = {
    "hgx-h100": hgx_h100,
    "a100-mig": a100_mig,
    "pcie-l4": pcie_l4,
    "two-islands": two_islands,
}
