"""Small helpers the e2e tests share: manifests and polling on the cluster under test."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster import create_nodes
from admission.devcluster.berth import BERTH_CLI
from admission.devcluster.nodes import FakeGpuNode

T = TypeVar("T")

# The berth CLI as a child process (the one definition, shared with berth dev-cluster).
BERTH: tuple[str, ...] = BERTH_CLI


def pod_manifest(name: str, *, gpus: int = 0, gates: tuple[str, ...] = (),
                 labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A kubectl-style pod; GPUs go in limits, as the device plugin requires."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.invalid/train:latest",
                        "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def berth_gated(pod: Any) -> bool:
    """Whether a pod (as the client reads it) is still behind Berth's scheduling gate."""
    return any(g.name == c.SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def eventually(fetch: Callable[[], T], check: Callable[[T], bool], *, timeout: float,
               what: str, interval: float = 0.25) -> T:
    """Fetch until ``check`` holds and return the last value; on timeout fail with ``what``
    and the last value seen, so a failing test says where the cluster got stuck."""
    deadline = time.monotonic() + timeout
    last = fetch()
    while not check(last):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                 f"last seen: {_brief(last)}")
        time.sleep(interval)
        last = fetch()
    return last


def _brief(obj: object) -> str:
    if isinstance(obj, list) and obj and hasattr(obj[0], "spec"):
        return "; ".join(describe_pod(p) for p in obj)
    if hasattr(obj, "spec") and hasattr(obj, "status"):
        return describe_pod(obj)
    text = repr(obj)
    return text if len(text) < 1500 else text[:1500] + "..."


def describe_pod(pod: Any) -> str:
    """One line with what decides where a pod stands: phase, node, gates, placement, and the
    scheduler's last word."""
    spec, status = pod.spec, pod.status
    gates = [g.name for g in spec.scheduling_gates or []]
    cond = pod_condition(pod, "PodScheduled")
    said = f"{cond.status}/{cond.reason}: {cond.message}" if cond else "-"
    aff = spec.affinity.node_affinity if spec.affinity and spec.affinity.node_affinity else None
    req = aff.required_during_scheduling_ignored_during_execution if aff else None
    terms = [[(e.key, e.operator, e.values) for e in t.match_expressions or []]
             for t in (req.node_selector_terms if req else [])]
    return (f"{pod.metadata.name}: phase={status.phase if status else None} "
            f"node={spec.node_name} gates={gates} nodeSelector={spec.node_selector} "
            f"affinity={terms} scheduled={said}")


def pod_condition(pod: Any, kind: str) -> Any:
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == kind:
            return cond
    return None


def api_refusal(call: Callable[[], object]) -> Any:
    """Run one API call; the ``ApiException`` it raised, or None when it went through."""
    from kubernetes.client.rest import ApiException

    try:
        call()
    except ApiException as exc:
        return exc
    return None


@contextlib.contextmanager
def gpu_node(core: client.CoreV1Api, prefix: str, model: str, *, gpus: int = 8,
             gpu_memory_mib: int = 81920) -> Iterator[str]:
    """One kwok GPU node of ``model`` named ``prefix-<random>`` for the block (a test's own
    node, which its policy may restrict tenants to); deleted afterwards."""
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    create_nodes(core, [FakeGpuNode(name=name, gpus=gpus, gpu_product=model,
                                    gpu_memory_mib=gpu_memory_mib)])
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            core.delete_node(name)
