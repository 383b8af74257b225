"""No sharing: whole GPUs only; a fraction is refused with the way to ask for whole GPUs."""

from __future__ import annotations

from collections.abc import Mapping

from admission.sharing.base import Reading, SharingError, Translation, plain_whole

_REFUSAL = ("this cluster does not share GPUs (policy sharing.backend: none); "
            "request whole GPUs with resources.limits nvidia.com/gpu")


class NoSharing:
    name = "none"
    resources: frozenset[str] = frozenset()

    def share(self, milli: int, memory_mib: int) -> Translation:
        raise SharingError(_REFUSAL)

    def whole(self, count: int) -> Translation:
        return plain_whole(count)

    def read(self, values: Mapping[str, int]) -> Reading:
        raise SharingError(_REFUSAL)
