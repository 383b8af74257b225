"""Standalone release: the default kube-scheduler binds within the node affinity Berth wrote.

Nothing else to add: the pin (required affinity on the node's name) plus the pod's own
constraints leave the scheduler exactly one node, which Berth chose with capacity to spare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from admission.controller.api import ClusterApi
    from admission.controller.snapshot import GangInfo
    from admission.controller.translate import Obj


class StandaloneBackend:
    name = "standalone"

    def pod_metadata(self, gang: GangInfo, queue: str | None) -> tuple[dict[str, str],
                                                                      dict[str, str]]:
        return {}, {}

    def prepare(self, api: ClusterApi, gang: GangInfo, queue: str | None) -> None:
        return None

    def problem(self, pod: Obj) -> str | None:
        return None
