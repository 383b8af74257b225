"""Which gang a pod belongs to, and how many pods the gang has, from what the pod already says.

Users keep their manifests: the gang is read from Berth's own annotation, else from the keys
Kueue, Volcano and KAI already use, else from the owner (JobSet, PyTorchJob, RayCluster, Job).
A pod with none of them is a gang of one. The size is known when the pod states it (Berth's
``gang-size`` or Kueue's ``pod-group-total-count``); otherwise it is left to the controller,
which can read the owner.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from admission import constants as c

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class GangError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class GangIdentity(NamedTuple):  # immutable, and cheaper to build than a frozen dataclass
    name: str  # unique within the namespace
    size: int | None  # None: not stated on the pod
    source: str  # the key that identified it: "berth", "kueue", "volcano", "kai", "job", ...

    @property
    def label(self) -> str:
        return label_value(self.name)


@lru_cache(maxsize=4096)  # pure; the pods of one gang arrive together and share the name
def label_value(name: str) -> str:
    """``name`` as a valid label value (63 chars max); long or odd names get a hash suffix."""
    if len(name) <= 63 and _LABEL_VALUE.match(name):
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    stem = re.sub(r"[^-A-Za-z0-9_.]", "-", name)[:50].strip("-_.")
    return f"{stem}-{digest}" if stem else f"g-{digest}"


_SIZE = re.compile(r"-?[0-9]{1,6}")  # ASCII only: int() would take "١٢", "1_0" and " 12 "


def _size(value: object, path: str) -> int:
    text = value if isinstance(value, str) else ""
    if not _SIZE.fullmatch(text):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "...'"
        raise GangError(path, f"must be a whole number of pods in digits 0-9, got {shown}")
    size = int(text)
    if size < 1:
        raise GangError(path, f"must be >= 1, got {size}")
    return size


# Owner kinds (apiVersion group, kind) whose pods form one gang, and the prefix of its name.
_OWNER_GANGS = {
    ("batch", "Job"): "job",
    ("jobset.x-k8s.io", "JobSet"): "jobset",
    ("kubeflow.org", "PyTorchJob"): "pytorchjob",
    ("ray.io", "RayCluster"): "raycluster",
}


def _owner(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(gang kind, owner name) of the pod's controlling owner when it is a known gang kind."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not (isinstance(ref, dict) and ref.get("controller")):
            continue
        api, owner_kind = ref.get("apiVersion", ""), ref.get("kind", "")
        if not (isinstance(api, str) and isinstance(owner_kind, str)):
            continue  # the API server sends strings; str() of a nested value could recurse
        kind = _OWNER_GANGS.get((api.rpartition("/")[0], owner_kind))
        if kind is not None and isinstance(ref.get("name"), str):
            return kind, ref["name"]
    return None


def identify_gang(
    meta: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str],
    fallback: str,
) -> GangIdentity:
    """The gang of a pod from its metadata; ``fallback`` names a gang of one (pod name or the
    review's uid when the name is still to be generated)."""
    declared = None
    if c.ANNOTATION_GANG_SIZE in annotations:
        declared = _size(
            annotations[c.ANNOTATION_GANG_SIZE], f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]"
        )

    if annotations.get(c.ANNOTATION_GANG):
        return GangIdentity(annotations[c.ANNOTATION_GANG], declared, "berth")

    if labels.get(c.KUEUE_POD_GROUP_LABEL):
        size = declared
        if c.KUEUE_POD_GROUP_COUNT in annotations:
            path = f"metadata.annotations[{c.KUEUE_POD_GROUP_COUNT}]"
            kueue = _size(annotations[c.KUEUE_POD_GROUP_COUNT], path)
            if declared is not None and declared != kueue:
                raise GangError(
                    f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
                    f"says {declared} pods but {c.KUEUE_POD_GROUP_COUNT} says {kueue}; "
                    "remove one or make them agree",
                )
            size = kueue
        return GangIdentity(labels[c.KUEUE_POD_GROUP_LABEL], size, "kueue")

    if annotations.get(c.VOLCANO_GROUP_ANNOTATION):
        return GangIdentity(annotations[c.VOLCANO_GROUP_ANNOTATION], declared, "volcano")
    if annotations.get(c.KAI_POD_GROUP):
        return GangIdentity(annotations[c.KAI_POD_GROUP], declared, "kai")

    for label, kind in (
        (c.JOBSET_NAME_LABEL, "jobset"),
        (c.PYTORCHJOB_NAME_LABEL, "pytorchjob"),
        (c.RAY_CLUSTER_LABEL, "raycluster"),
    ):
        if labels.get(label):
            return GangIdentity(f"{kind}-{labels[label]}", declared, kind)

    owner = _owner(meta)
    if owner is not None:
        return GangIdentity(f"{owner[0]}-{owner[1]}", declared, owner[0])
    if labels.get(c.JOB_NAME_LABEL):
        return GangIdentity(f"job-{labels[c.JOB_NAME_LABEL]}", declared, "job")

    if declared not in (None, 1):
        raise GangError(
            f"metadata.annotations[{c.ANNOTATION_GANG_SIZE}]",
            f"says {declared} pods but the pod names no gang; add {c.ANNOTATION_GANG}",
        )
    return GangIdentity(f"pod-{fallback}", 1, "pod")
