"""What a sharing backend turns a GPU demand into: container resources and env.

Resources are immutable once a pod exists (KEP-3838), so the webhook translates a fraction into
the backend's vocabulary at CREATE. Each backend is one small adapter with two methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from admission.constants import RESOURCE_GPU


class SharingError(ValueError):
    """The backend cannot express this demand; the message says what it can express."""


@dataclass(frozen=True, slots=True)
class Translation:
    """Resources to set on the GPU container (limits, and requests where present), resources to
    drop from it, env vars to add, and the share of the GPU the pod will really hold."""

    milli: int
    resources: tuple[tuple[str, int], ...] = ()
    remove: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


class SharingAdapter(Protocol):
    name: str

    def share(self, milli: int, memory_mib: int) -> Translation:
        """A share of one GPU (``milli`` < 1000), optionally with GPU memory in MiB."""
        ...

    def whole(self, count: int) -> Translation:
        """``count`` whole GPUs."""
        ...


def plain_whole(count: int) -> Translation:
    return Translation(milli=1000, resources=((RESOURCE_GPU, count),))
