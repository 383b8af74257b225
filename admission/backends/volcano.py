"""Volcano release: a PodGroup per gang with ``minMember``, in the tenant's Volcano queue.

``schedulerName`` cannot change once a pod exists, so Berth's webhook sets ``volcano`` at
CREATE when the policy releases to Volcano; here the PodGroup is created (or its ``minMember``
and queue brought up to date) before any gate opens, and every pod names its group and queue.
Volcano then binds the whole group or none of it, within the node affinity Berth wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from admission import constants as c
from admission.controller import translate as tr

if TYPE_CHECKING:
    from admission.controller.api import ClusterApi
    from admission.controller.snapshot import GangInfo
    from admission.controller.translate import Obj

GROUP, VERSION, PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"


def group_name(gang: GangInfo) -> str:
    """An explicit Volcano group wins; otherwise the gang's label value (a valid name)."""
    for p in gang.pods:
        explicit = tr.annotations_of(p).get(c.VOLCANO_GROUP_ANNOTATION)
        if explicit:
            return explicit
    for p in gang.pods:
        label = tr.labels(p).get(c.LABEL_GANG)
        if label:
            return label
    return gang.key.split("/", 1)[1]


class VolcanoBackend:
    name = "volcano"

    def pod_metadata(self, gang: GangInfo, queue: str | None) -> tuple[dict[str, str],
                                                                      dict[str, str]]:
        annotations = {c.VOLCANO_GROUP_ANNOTATION: group_name(gang)}
        if queue:
            annotations[c.VOLCANO_QUEUE_ANNOTATION] = queue
        return {}, annotations

    def pod_group(self, gang: GangInfo, queue: str | None) -> dict[str, object]:
        namespace = gang.key.split("/", 1)[0]
        spec: dict[str, object] = {"minMember": gang.size}
        if queue:
            spec["queue"] = queue
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": group_name(gang), "namespace": namespace,
                         "labels": {c.LABEL_MANAGED: "true"}},
            "spec": spec,
        }

    def prepare(self, api: ClusterApi, gang: GangInfo, queue: str | None) -> None:
        api.apply_custom(GROUP, VERSION, PLURAL, gang.key.split("/", 1)[0],
                         self.pod_group(gang, queue))

    def problem(self, pod: Obj) -> str | None:
        if tr.spec(pod).get("schedulerName") != c.VOLCANO_SCHEDULER:
            return ("schedulerName is not 'volcano' and cannot change after creation; the "
                    "webhook sets it when release.backend is volcano")
        return None
