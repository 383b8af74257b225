"""Keys Kueue and Volcano read only at creation are added by the webhook, never overwritten,
and the release writes the same keys again."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from review_helpers import SAMPLE, fixture, policy_from
from test_review import decide

from admission import constants as c
from admission.backends import backend_named


def _policy(backend: str) -> Any:
    text = SAMPLE.read_text().replace("backend: standalone", f"backend: {backend}")
    assert f"backend: {backend}" in text
    return policy_from(text)


KUEUE, VOLCANO, STANDALONE = _policy("kueue"), _policy("volcano"), _policy("standalone")


def _with_gang(payload: dict[str, Any], size: int) -> dict[str, Any]:
    out = copy.deepcopy(payload)
    meta = out["request"]["object"]["metadata"]
    meta.setdefault("annotations", {}).update({c.ANNOTATION_GANG: "trainer",
                                               c.ANNOTATION_GANG_SIZE: str(size)})
    return out


def test_kueue_queue_and_pod_group_are_added_at_creation() -> None:
    _, pod = decide(_with_gang(fixture("plain-gpu-pod.json"), 2), KUEUE)
    labels, ann = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[c.KUEUE_QUEUE_LABEL] == "team-b-queue"
    assert labels[c.KUEUE_POD_GROUP_LABEL] == labels[c.LABEL_GANG]
    assert ann[c.KUEUE_POD_GROUP_COUNT] == "2"


def test_kueue_single_pod_gets_no_pod_group() -> None:
    _, pod = decide(fixture("plain-gpu-pod.json"), KUEUE)
    assert pod["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] == "team-b-queue"
    assert c.KUEUE_POD_GROUP_LABEL not in pod["metadata"]["labels"]


def test_kueue_keys_the_user_wrote_are_kept() -> None:
    _, pod = decide(fixture("kueue-pod.json"), KUEUE)
    original = fixture("kueue-pod.json")["request"]["object"]["metadata"]
    for key in (c.KUEUE_QUEUE_LABEL, c.KUEUE_POD_GROUP_LABEL):
        assert pod["metadata"]["labels"][key] == original["labels"][key]


def test_volcano_group_and_queue_annotations() -> None:
    _, pod = decide(_with_gang(fixture("plain-gpu-pod.json"), 2), VOLCANO)
    ann = pod["metadata"]["annotations"]
    assert ann[c.VOLCANO_QUEUE_ANNOTATION] == "team-b"
    assert ann[c.VOLCANO_GROUP_ANNOTATION] == pod["metadata"]["labels"][c.LABEL_GANG]
    assert pod["spec"]["schedulerName"] == c.VOLCANO_SCHEDULER


@pytest.mark.parametrize("name", ["plain-gpu-pod.json", "job-pod.json"])
def test_standalone_adds_no_backend_keys(name: str) -> None:
    _, pod = decide(_with_gang(fixture(name), 2), STANDALONE)
    keys = set(pod["metadata"]["labels"]) | set(pod["metadata"]["annotations"])
    assert not keys & {c.KUEUE_QUEUE_LABEL, c.KUEUE_POD_GROUP_LABEL, c.VOLCANO_GROUP_ANNOTATION,
                       c.VOLCANO_QUEUE_ANNOTATION}


@dataclass
class _Gang:
    key: str
    size: int
    pods: list[dict[str, Any]]


@pytest.mark.parametrize("policy", [KUEUE, VOLCANO, STANDALONE],
                         ids=["kueue", "volcano", "standalone"])
def test_release_writes_again_what_the_webhook_added_at_creation(policy: Any) -> None:
    pods = [decide(_with_gang(fixture("plain-gpu-pod.json"), 2), policy)[1] for _ in range(2)]
    meta = pods[0]["metadata"]
    backend = backend_named(policy.release.backend)
    queue = meta["annotations"].get(c.ANNOTATION_QUEUE)
    added_labels: dict[str, str] = {}
    added_annotations: dict[str, str] = {}
    backend.creation_keys(queue=queue, group=meta["labels"][c.LABEL_GANG], size=2, labels={},
                          annotations={}, add_labels=added_labels,
                          add_annotations=added_annotations)
    assert added_labels.items() <= meta["labels"].items()
    assert added_annotations.items() <= meta["annotations"].items()
    released = backend.pod_metadata(_Gang("team-b/trainer", 2, pods), queue)
    assert released == (added_labels, added_annotations)
    assert bool(added_labels or added_annotations) == (backend.name != "standalone")
