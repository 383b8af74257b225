"""Volcano release: a PodGroup per gang with ``minMember``, in the tenant's Volcano queue.

``schedulerName`` cannot change once a pod exists, so Berth's webhook sets ``volcano`` at
CREATE when the policy releases to Volcano, with the group and queue annotations the user left
out; here the PodGroup is created (or its ``minMember`` and queue brought up to date) before
any gate opens, and every pod names its group and queue.
Volcano then binds the whole group or none of it, within the node affinity Berth wrote.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission import constants as c
from admission import objects
from admission.backends.base import BackendName, CustomObjects, ReleasedGang
from admission.objects import Obj

GROUP, VERSION, PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"


def group_name(gang: ReleasedGang) -> str:
    """An explicit Volcano group wins; otherwise the gang's label value (a valid name)."""
    for p in gang.pods:
        explicit = objects.annotations_of(p).get(c.VOLCANO_GROUP_ANNOTATION)
        if explicit:
            return explicit
    for p in gang.pods:
        label = objects.labels(p).get(c.LABEL_GANG)
        if label:
            return label
    return gang.key.split("/", 1)[1]


class VolcanoBackend:
    name = BackendName.VOLCANO
    title = "Volcano"
    scheduler_name: str | None = c.VOLCANO_SCHEDULER
    queue_kind: str | None = "Volcano Queue"

    def creation_keys(self, *, queue: str | None, group: str, size: int | None,
                      labels: Mapping[str, str], annotations: Mapping[str, str],
                      add_labels: dict[str, str], add_annotations: dict[str, str]) -> None:
        """Volcano reads the group and the queue from annotations."""
        if queue and c.VOLCANO_QUEUE_ANNOTATION not in annotations:
            add_annotations[c.VOLCANO_QUEUE_ANNOTATION] = queue
        if c.VOLCANO_GROUP_ANNOTATION not in annotations:
            add_annotations[c.VOLCANO_GROUP_ANNOTATION] = group

    def pod_metadata(self, gang: ReleasedGang, queue: str | None) -> tuple[dict[str, str],
                                                                          dict[str, str]]:
        annotations = {c.VOLCANO_GROUP_ANNOTATION: group_name(gang)}
        if queue:
            annotations[c.VOLCANO_QUEUE_ANNOTATION] = queue
        return {}, annotations

    def pod_group(self, gang: ReleasedGang, queue: str | None) -> dict[str, object]:
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

    def prepare(self, api: CustomObjects, gang: ReleasedGang, queue: str | None) -> None:
        api.apply_custom(GROUP, VERSION, PLURAL, gang.key.split("/", 1)[0],
                         self.pod_group(gang, queue))

    def problem(self, pod: Obj) -> str | None:
        if objects.spec(pod).get("schedulerName") != c.VOLCANO_SCHEDULER:
            return ("schedulerName is not 'volcano' and cannot change after creation; the "
                    "webhook sets it when release.backend is volcano")
        return None

    def waiting_for(self, pod: Obj) -> str | None:
        return None
