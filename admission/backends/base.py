"""The one interface every release backend implements: a handful of methods, no hooks.

A backend adds metadata to each pod at release (labels and annotations its queue reads),
prepares any object its queue needs before the gates open, and says what a pod lacks that only
the webhook could have set at CREATE (fields KEP-3838 does not let a gated pod change, such as
``schedulerName``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from admission.controller.api import ClusterApi
    from admission.controller.snapshot import GangInfo
    from admission.controller.translate import Obj


class Backend(Protocol):
    name: str

    def pod_metadata(self, gang: GangInfo, queue: str | None) -> tuple[dict[str, str],
                                                                      dict[str, str]]:
        """(labels, annotations) every pod of the gang carries when released."""
        ...

    def prepare(self, api: ClusterApi, gang: GangInfo, queue: str | None) -> None:
        """Create or update what the queue needs before any gate opens (idempotent)."""
        ...

    def problem(self, pod: Obj) -> str | None:
        """What the pod lacks for this backend that can no longer be added, or None."""
        ...
