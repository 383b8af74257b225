"""Standalone release: the default kube-scheduler binds within the node affinity Berth wrote.

Nothing else to add, at creation or at release: the pin (required affinity on the node's name)
plus the pod's own constraints leave the scheduler exactly one node, which Berth chose with
capacity to spare.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.backends.base import BackendName, CustomObjects, ReleasedGang
from admission.objects import Obj


class StandaloneBackend:
    name = BackendName.STANDALONE
    title = "the default scheduler"
    scheduler_name: str | None = None
    queue_kind: str | None = None

    def creation_keys(self, *, queue: str | None, group: str, size: int | None,
                      labels: Mapping[str, str], annotations: Mapping[str, str],
                      add_labels: dict[str, str], add_annotations: dict[str, str]) -> None:
        return None

    def pod_metadata(self, gang: ReleasedGang, queue: str | None) -> tuple[dict[str, str],
                                                                          dict[str, str]]:
        return {}, {}

    def prepare(self, api: CustomObjects, gang: ReleasedGang, queue: str | None) -> None:
        return None

    def problem(self, pod: Obj) -> str | None:
        return None

    def waiting_for(self, pod: Obj) -> str | None:
        return None
