"""A small DRA publisher for the e2e cluster: kwok nodes whose GPUs exist only as
ResourceSlices, and the DeviceClasses NVIDIA's DRA driver installs.

kwok runs no containers, so no real driver (nor its kubelet plugin) runs here. What the
scheduler needs to allocate claims is all in the API: the DeviceClasses, and one ResourceSlice
per node listing its devices with the attributes the driver publishes (``type``, ``uuid``,
``productName``, the ``memory`` capacity; for a MIG device ``profile`` and ``parentUUID``).
The real kube-scheduler allocates the claims; kube-controller-manager makes claims from templates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster.nodes import FakeGpuNode

DRIVER = c.DRA_DRIVER
A100 = "NVIDIA A100-SXM4-80GB"  # productName as the driver publishes it

DEVICE_CLASSES: tuple[dict[str, Any], ...] = tuple(
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
     "spec": {"selectors": [{"cel": {"expression":
              f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"}}]}}
    for name, kind in ((c.DRA_GPU_CLASS, "gpu"), (c.DRA_MIG_CLASS, "mig")))


@dataclass(frozen=True)
class DraNode:
    """A kwok node with ``gpus`` whole GPUs and, per entry of ``mig``, a GPU in MIG mode
    published as MIG devices of those profiles (``("3g.40gb", "3g.40gb")``). ``shared``: the
    whole GPUs allow multiple allocations, claims sharing them by their memory (consumable
    capacity, Kubernetes 1.36+)."""

    name: str
    gpus: int = 8
    model: str = A100
    mig: tuple[tuple[str, ...], ...] = ()
    shared: bool = False

    def node(self) -> dict[str, Any]:
        manifest = FakeGpuNode(self.name, gpus=0, labels={"berth-e2e/dra": "true"}).manifest()
        for section in ("capacity", "allocatable"):
            manifest["status"][section].pop("nvidia.com/gpu", None)
        manifest["metadata"]["labels"].pop("nvidia.com/gpu.product", None)
        return manifest

    def resource_slice(self) -> dict[str, Any]:
        devices: list[dict[str, Any]] = []
        for i in range(self.gpus):
            devices.append({"name": f"gpu-{i}", "attributes": {
                "type": {"string": "gpu"}, "productName": {"string": self.model},
                "uuid": {"string": f"GPU-{self.name}-{i}"}},
                "capacity": {"memory": {"value": "80Gi"}}})
            if self.shared:
                devices[-1]["allowMultipleAllocations"] = True
        for j, profiles in enumerate(self.mig):
            parent = self.gpus + j
            for k, profile in enumerate(profiles):
                # device names are DNS labels: no dots (the profile's are dashes here)
                dashed = profile.replace(".", "-")
                devices.append({"name": f"gpu-{parent}-mig-{dashed}-{k}", "attributes": {
                    "type": {"string": "mig"}, "productName": {"string": self.model},
                    "profile": {"string": profile},
                    "parentUUID": {"string": f"GPU-{self.name}-{parent}"},
                    "uuid": {"string": f"MIG-{self.name}-{parent}-{k}"}},
                    "capacity": {"memory": {"value": "40Gi"}}})
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{self.name}-{DRIVER}"},
                "spec": {"driver": DRIVER, "nodeName": self.name,
                         "pool": {"name": self.name, "generation": 1, "resourceSliceCount": 1},
                         "devices": devices}}


def publish(api: client.ApiClient, nodes: Sequence[DraNode]) -> None:
    """The DeviceClasses (kept if present), the nodes and their slices."""
    resource = client.ResourceV1Api(api)
    core = client.CoreV1Api(api)
    for cls in DEVICE_CLASSES:
        try:
            resource.create_device_class(cls)
        except ApiException as exc:
            if exc.status != 409:
                raise
    for n in nodes:
        core.create_node(n.node())
        resource.create_resource_slice(n.resource_slice())


def withdraw(api: client.ApiClient, nodes: Iterable[DraNode]) -> None:
    resource = client.ResourceV1Api(api)
    core = client.CoreV1Api(api)
    for n in nodes:
        with contextlib.suppress(ApiException):
            resource.delete_resource_slice(f"{n.name}-{DRIVER}")
        with contextlib.suppress(ApiException):
            core.delete_node(n.name)


def template(name: str, count: int = 1, *, selectors: Sequence[str] = (),
             device_class: str = c.DRA_GPU_CLASS, memory: str | None = None) -> dict[str, Any]:
    """A claim template for ``count`` devices; ``memory``: a share of one GPU by consumable
    capacity."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def product_is(model: str) -> str:
    return f'device.attributes["{DRIVER}"].productName == "{model}"'


def profile_is(profile: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{profile}"'


def claim_pod(name: str, template_name: str, *, extra_limits: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """A pod whose GPUs come from a claim made from ``template_name``."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"},
                                 "claims": [{"name": "gpu"}]}
    if extra_limits:
        resources["limits"] = dict(extra_limits)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/train:latest",
                                     "resources": resources}],
                     "resourceClaims": [{"name": "gpu",
                                         "resourceClaimTemplateName": template_name}],
                     "terminationGracePeriodSeconds": 0}}
