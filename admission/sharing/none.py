"""No sharing: whole GPUs only; a fraction is refused with the way to ask for whole GPUs."""

from __future__ import annotations

from admission.sharing.base import SharingError, Translation, plain_whole


class NoSharing:
    name = "none"

    def share(self, milli: int, memory_mib: int) -> Translation:
        raise SharingError(
            "this cluster does not share GPUs (policy sharing.backend: none); "
            "request whole GPUs with resources.limits nvidia.com/gpu"
        )

    def whole(self, count: int) -> Translation:
        return plain_whole(count)
