"""HAMi: one ``nvidia.com/gpu`` with ``nvidia.com/gpucores`` (percent of SMs) and GPU memory
(``nvidia.com/gpumem`` in MiB, or ``nvidia.com/gpumem-percentage`` when none was asked)."""

from __future__ import annotations

from admission.constants import HAMI_GPU_CORES, HAMI_GPU_MEM, HAMI_GPU_MEM_PERCENT, RESOURCE_GPU
from admission.sharing.base import Translation, plain_whole


class HamiAdapter:
    name = "hami"

    def share(self, milli: int, memory_mib: int) -> Translation:
        percent = max(1, round(milli / 10))
        memory = (HAMI_GPU_MEM, memory_mib) if memory_mib else (HAMI_GPU_MEM_PERCENT, percent)
        return Translation(
            milli=milli, resources=((RESOURCE_GPU, 1), (HAMI_GPU_CORES, percent), memory)
        )

    def whole(self, count: int) -> Translation:
        return plain_whole(count)
