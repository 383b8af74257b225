"""Gang identity from every vocabulary Berth accepts, and its size when the pod states it."""

from __future__ import annotations

import pytest

from admission import constants as c
from admission.webhook import GangError, identify_gang, label_value


def owner(api: str, kind: str, name: str) -> dict[str, object]:
    return {"ownerReferences": [{"apiVersion": api, "kind": kind, "name": name,
                                 "uid": "u", "controller": True}]}


CASES = [
    ("berth annotation", {}, {}, {c.ANNOTATION_GANG: "g1", c.ANNOTATION_GANG_SIZE: "4"},
     ("g1", 4, "berth")),
    ("kueue", {}, {c.KUEUE_POD_GROUP_LABEL: "pg"}, {c.KUEUE_POD_GROUP_COUNT: "3"},
     ("pg", 3, "kueue")),
    ("volcano", {}, {}, {c.VOLCANO_GROUP_ANNOTATION: "vg"}, ("vg", None, "volcano")),
    ("kai", {}, {}, {c.KAI_POD_GROUP: "kg"}, ("kg", None, "kai")),
    ("jobset label", {}, {c.JOBSET_NAME_LABEL: "js"}, {}, ("jobset-js", None, "jobset")),
    ("pytorchjob owner", owner("kubeflow.org/v1", "PyTorchJob", "pt"), {}, {},
     ("pytorchjob-pt", None, "pytorchjob")),
    ("raycluster label", {}, {c.RAY_CLUSTER_LABEL: "rc"}, {}, ("raycluster-rc", None,
                                                               "raycluster")),
    ("job owner", owner("batch/v1", "Job", "train"), {}, {c.ANNOTATION_GANG_SIZE: "8"},
     ("job-train", 8, "job")),
    ("volcano job is not a batch Job", owner("batch.volcano.sh/v1alpha1", "Job", "v"), {}, {},
     ("pod-p", 1, "pod")),
    ("replicaset pods are gangs of one", owner("apps/v1", "ReplicaSet", "rs"), {}, {},
     ("pod-p", 1, "pod")),
]


@pytest.mark.parametrize(("case", "meta", "labels", "annotations", "want"), CASES,
                         ids=[x[0] for x in CASES])
def test_gang_identity(case: str, meta: dict[str, object], labels: dict[str, str],
                       annotations: dict[str, str], want: tuple[str, int | None, str]) -> None:
    gang = identify_gang(meta, labels, annotations, "p")
    assert (gang.name, gang.size, gang.source) == want


@pytest.mark.parametrize(
    ("labels", "annotations", "needle"),
    [
        ({}, {c.ANNOTATION_GANG: "g", c.ANNOTATION_GANG_SIZE: "many"}, "whole number of pods"),
        ({}, {c.ANNOTATION_GANG_SIZE: "3"}, "names no gang"),
        ({c.KUEUE_POD_GROUP_LABEL: "pg"}, {c.KUEUE_POD_GROUP_COUNT: "-1"}, "must be >= 1"),
    ],
)
def test_gang_errors(labels: dict[str, str], annotations: dict[str, str], needle: str) -> None:
    with pytest.raises(GangError, match=needle):
        identify_gang({}, labels, annotations, "p")


def test_label_values_are_valid() -> None:
    assert label_value("job-train") == "job-train"
    for odd in ("x" * 64, "a/b c", "-lead", "ünïcode"):
        value = label_value(odd)
        assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()
        assert label_value(odd) == value  # stable: every pod of the gang gets the same label
    assert label_value("a" * 70) != label_value("a" * 71)
