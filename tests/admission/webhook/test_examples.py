"""Every workload in config/examples/ passes the webhook against the sample policy, with the gang
its comments promise.

Each pod template is reviewed as the apiserver would send it at CREATE: a Job's pods with the
Job as controlling owner and the labels the Job controller adds, a Deployment's with a
ReplicaSet owner and a generated name, bare Pods as written. The snapshot example is a
``berth solve`` input, not a workload, and is skipped.
"""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from review_helpers import ROOT, SAMPLE, policy_from
from test_review import decide

from admission import constants as c
from admission.policy import load_policy

EXAMPLES = ROOT / "config" / "examples"
NOT_WORKLOADS = {"snapshot.yaml"}
POLICY = load_policy(SAMPLE)
UNDER = {b: policy_from(SAMPLE.read_text().replace("backend: standalone", f"backend: {b}"))
         for b in ("kueue", "volcano")}


@dataclass(frozen=True)
class Gang:
    name: str  # berth.dev/gang-name ("pod-..." for a gang of one: named after the pod)
    size: int
    source: str


# What each example's comments say Berth makes of it: file -> gang of every pod in it.
EXPECTED: dict[str, Gang] = {
    "training-job-gang.yaml": Gang("job-llama-pretrain", 2, "job"),
    "pytorchjob-gang.yaml": Gang("pytorchjob-bert-finetune", 3, "pytorchjob"),
    "inference-deployment-hpa.yaml": Gang("pod-", 1, "pod"),
    "ray-cluster-gang.yaml": Gang("raycluster-rl-sweep", 3, "raycluster"),
    "notebook.yaml": Gang("pod-jupyter-alice", 1, "pod"),
    "kueue-job.yaml": Gang("job-eval-sweep", 2, "job"),
    "volcano-job.yaml": Gang("mpi-allreduce", 2, "volcano"),
    "nightly-eval-job.yaml": Gang("job-nightly-eval", 2, "job"),
}


def _files() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.yaml") if p.name not in NOT_WORKLOADS)


def _owner(api: str, kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": str(uuid.uuid4()),
            "controller": True, "blockOwnerDeletion": True}


def pods_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the apiserver would be asked to create for one object (one per replica /
    parallel pod), as their controllers create them; none for objects that are not pods."""
    kind, meta = doc["kind"], doc["metadata"]
    if kind == "Pod":
        return [copy.deepcopy(doc)]
    if kind not in ("Job", "Deployment", "StatefulSet"):
        return []
    spec = doc["spec"]
    count = spec.get("parallelism", 1) if kind == "Job" else spec.get("replicas", 1)
    pods = []
    for i in range(count):
        template = copy.deepcopy(spec["template"])
        pm = template.setdefault("metadata", {})
        pm["namespace"] = meta["namespace"]
        labels = pm.setdefault("labels", {})
        if kind == "Job":
            uid = str(uuid.uuid4())
            labels.update({"batch.kubernetes.io/job-name": meta["name"],
                           "job-name": meta["name"], "controller-uid": uid})
            stem = meta["name"] + (f"-{i}" if spec.get("completionMode") == "Indexed" else "")
            pm["generateName"] = f"{stem}-"
            pm["ownerReferences"] = [_owner("batch/v1", "Job", meta["name"])]
        elif kind == "Deployment":
            pm["generateName"] = f"{meta['name']}-5d8f7c9b4-"
            pm["ownerReferences"] = [_owner("apps/v1", "ReplicaSet",
                                            f"{meta['name']}-5d8f7c9b4")]
        else:
            pm["name"] = f"{meta['name']}-{i}"
            pm["ownerReferences"] = [_owner("apps/v1", "StatefulSet", meta["name"])]
        pods.append({"apiVersion": "v1", "kind": "Pod", **template})
    return pods


def review_payload(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": meta.get("name", ""), "namespace": meta["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": pod, "dryRun": False}}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_example_is_listed_and_parses() -> None:
    names = {p.name for p in _files()}
    assert names == set(EXPECTED), "list the gang each example in config/examples/ should form"
    for path in _files():
        docs = _docs(path)
        assert docs and all("kind" in d and d["metadata"].get("namespace") for d in docs), path
        assert path.read_text().startswith("#"), f"{path.name}: say what it shows in a comment"


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_example_pods_are_admitted_with_the_expected_gang(path: Path) -> None:
    want = EXPECTED[path.name]
    members: Counter[str] = Counter()
    pods = [p for d in _docs(path) for p in pods_of(d)]
    assert pods, f"{path.name} has no pod template"
    for pod in pods:
        decision, out = decide(review_payload(pod), POLICY)
        assert decision.response["allowed"], decision.response.get("status")
        assert decision.outcome == "mutated", (decision.outcome, decision.reason)
        labels, ann = out["metadata"]["labels"], out["metadata"]["annotations"]
        assert labels[c.LABEL_TENANT] == pod["metadata"]["namespace"]  # team-a / team-b
        assert [g["name"] for g in out["spec"]["schedulingGates"]] == [c.SCHEDULING_GATE]
        assert ann[c.ANNOTATION_GANG_SOURCE] == want.source
        assert ann[c.ANNOTATION_GANG_NAME].startswith(want.name)
        assert int(ann.get(c.ANNOTATION_GANG_SIZE, "1")) == want.size
        members[ann[c.ANNOTATION_GANG_NAME]] += 1
    if want.size > 1:  # one gang, and the file creates exactly its declared number of pods
        assert members == Counter({want.name: want.size}), members
    else:
        assert all(n == 1 for n in members.values()), members


def test_fractional_examples_become_time_slicing_slots() -> None:
    for name in ("notebook.yaml", "inference-deployment-hpa.yaml"):
        pod = next(p for d in _docs(EXAMPLES / name) for p in pods_of(d))
        _, out = decide(review_payload(pod), POLICY)
        limits = out["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu.shared"] == "2", name  # 0.5 x 4 replicas
        assert out["metadata"]["annotations"][c.ANNOTATION_GPU_MILLI] == "500"


def test_backend_examples_carry_their_backend_keys() -> None:
    kueue = next(p for d in _docs(EXAMPLES / "kueue-job.yaml") for p in pods_of(d))
    _, out = decide(review_payload(kueue), UNDER["kueue"])
    labels = out["metadata"]["labels"]
    assert labels[c.KUEUE_QUEUE_LABEL] == "team-a-queue"  # the LocalQueue the dev cluster makes
    assert labels[c.KUEUE_POD_GROUP_LABEL] == "job-eval-sweep"
    assert out["metadata"]["annotations"][c.KUEUE_POD_GROUP_COUNT] == "2"

    volcano = next(p for d in _docs(EXAMPLES / "volcano-job.yaml") for p in pods_of(d))
    _, out = decide(review_payload(volcano), UNDER["volcano"])
    ann = out["metadata"]["annotations"]
    assert ann[c.VOLCANO_GROUP_ANNOTATION] == "mpi-allreduce"
    assert ann[c.VOLCANO_QUEUE_ANNOTATION] == "team-a"
    assert out["spec"]["schedulerName"] == c.VOLCANO_SCHEDULER

