"""The controller's reading of a pod's resources agrees with the webhook's translation: every
pod the webhook admits, in every sharing backend, is one whose demand the controller believes
(:func:`admission.controller.demand.problem` is None); change its resources and it is not."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from admission import jsonpatch
from admission.controller import demand
from admission.policy import Policy
from admission.webhook.review import review

BACKENDS: dict[str, dict[str, Any]] = {
    "none": {"backend": "none"},
    "time-slicing": {"backend": "time-slicing"},
    "time-slicing-as-gpu": {"backend": "time-slicing",
                            "timeSlicing": {"resourceName": "nvidia.com/gpu", "replicas": 4}},
    "mps": {"backend": "mps"},
    "mps-as-gpu": {"backend": "mps", "mps": {"resourceName": "nvidia.com/gpu"}},
    "mig": {"backend": "mig"},
    "hami": {"backend": "hami"},
}
DEMANDS: dict[str, tuple[int, dict[str, str]]] = {  # whole GPUs in limits, annotations
    "one": (1, {}),
    "eight": (8, {}),
    "quarter": (0, {"berth.dev/gpu-fraction": "0.25"}),
    "half-of-one": (1, {"berth.dev/gpu-fraction": "0.5"}),
    "memory": (0, {"berth.dev/gpu-memory": "20Gi"}),
}


def policy(sharing: dict[str, Any]) -> Policy:
    return Policy.model_validate({
        "tenants": [{"name": "team-a", "namespaces": ["team-a"]}],
        "gpuModels": [{"name": "NVIDIA-H100-80GB-HBM3", "memoryMiB": 81920}],
        "sharing": sharing,
    })


def admitted(p: Policy, gpus: int, annotations: dict[str, str]) -> dict[str, Any] | None:
    """The pod as the API server stores it after the webhook's patch; None if refused."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "team-a", "annotations": dict(annotations)},
           "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]}}
    request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"},
               "operation": "CREATE", "namespace": "team-a", "name": "p", "object": pod}
    response = review(request, p).response
    if not response.get("allowed") or "patch" not in response:
        return None
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply(pod, ops)


# Fractions and GPU memory need a sharing backend: with none the webhook refuses them.
REFUSED = {("none", "half-of-one"), ("none", "memory"), ("none", "quarter")}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("what", sorted(DEMANDS))
def test_what_the_webhook_admits_the_controller_believes(backend: str, what: str) -> None:
    p = policy(BACKENDS[backend])
    gpus, annotations = DEMANDS[what]
    pod = admitted(p, gpus, annotations)
    if (backend, what) in REFUSED:
        assert pod is None, f"sharing {backend} takes whole GPUs only, yet admitted {what}"
        return
    assert pod is not None, f"sharing {backend} refused {what}"
    assert demand.problem(pod, p.sharing) is None
    # One GPU resource more than the webhook wrote, or the GPU resources gone: not believed.
    more = copy.deepcopy(pod)
    limits = more["spec"]["containers"][0]["resources"].setdefault("limits", {})
    key = next((k for k in limits if k.startswith("nvidia.com/") and "mem" not in k),
               "nvidia.com/gpu")
    limits[key] = str(int(limits.get(key, "0")) + 1)
    more["spec"]["containers"][0]["resources"].get("requests", {}).pop(key, None)
    assert demand.problem(more, p.sharing) is not None
    gone = copy.deepcopy(pod)
    for section in gone["spec"]["containers"][0]["resources"].values():
        for k in [k for k in section if k.startswith("nvidia.com/")]:
            del section[k]
    assert demand.problem(gone, p.sharing) is not None
