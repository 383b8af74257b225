"""HAMi: one ``nvidia.com/gpu`` with ``nvidia.com/gpucores`` (percent of SMs) and GPU memory
(``nvidia.com/gpumem`` in MiB, or ``nvidia.com/gpumem-percentage`` when none was asked). A pod
written in HAMi's resources holds ``gpucores`` percent of the GPU (else ``gpumem-percentage``)."""

from __future__ import annotations

from collections.abc import Mapping

from admission.constants import HAMI_GPU_CORES, HAMI_GPU_MEM, HAMI_GPU_MEM_PERCENT, RESOURCE_GPU
from admission.sharing.base import Reading, SharingError, Translation, plain_whole


class HamiAdapter:
    name = "hami"
    resources = frozenset({HAMI_GPU_CORES, HAMI_GPU_MEM, HAMI_GPU_MEM_PERCENT})

    def share(self, milli: int, memory_mib: int) -> Translation:
        percent = max(1, round(milli / 10))
        memory = (HAMI_GPU_MEM, memory_mib) if memory_mib else (HAMI_GPU_MEM_PERCENT, percent)
        return Translation(
            milli=milli, resources=((RESOURCE_GPU, 1), (HAMI_GPU_CORES, percent), memory)
        )

    def whole(self, count: int) -> Translation:
        return plain_whole(count)

    def read(self, values: Mapping[str, int]) -> Reading:
        if values.get(RESOURCE_GPU) != 1:
            raise SharingError(f"HAMi shares one GPU: set {RESOURCE_GPU} to 1 beside "
                               f"{', '.join(sorted(k for k in values if k != RESOURCE_GPU))}")
        for key in (HAMI_GPU_CORES, HAMI_GPU_MEM_PERCENT):
            if key in values and not 1 <= values[key] <= 100:
                raise SharingError(f"{key} is a percentage of the GPU: 1 to 100")
        percent = values.get(HAMI_GPU_CORES, values.get(HAMI_GPU_MEM_PERCENT))
        if percent is None:
            raise SharingError(f"set {HAMI_GPU_CORES} (percent of the GPU) beside "
                               f"{HAMI_GPU_MEM}, or annotate berth.dev/gpu-memory instead")
        memory = values.get(HAMI_GPU_MEM, 0)
        resources = tuple((k, v) for k, v in values.items())
        return Reading(percent * 10, memory, Translation(milli=percent * 10, resources=resources))
