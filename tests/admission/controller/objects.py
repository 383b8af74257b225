"""Builders over recorded API objects (tests/admission/controller/recorded/*.json, shaped as the API
server returns them): each test changes only what it is about."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from admission.controller.translate import rfc3339

RECORDED = Path(__file__).parent / "recorded"
T0 = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC)


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / name).read_text())


_NODE = recorded("node-gpu.json")
_POD = recorded("pod-gated.json")


def node(name: str, *, gpus: int = 8, rack: str = "rack-1", ready: bool = True,
         cordoned: bool = False, taints: list[dict[str, str]] | None = None,
         model: str = "NVIDIA-H100-80GB-HBM3", cpu: str = "191500m",
         memory: str = "2086666240Ki") -> dict[str, Any]:
    n = copy.deepcopy(_NODE)
    n["metadata"]["name"] = name
    n["metadata"]["uid"] = f"uid-node-{name}"
    labels = n["metadata"]["labels"]
    labels["kubernetes.io/hostname"] = name
    labels["topology.kubernetes.io/rack"] = rack
    labels["nvidia.com/gpu.product"] = model
    labels["nvidia.com/gpu.count"] = str(gpus)
    for section in ("capacity", "allocatable"):
        n["status"][section]["nvidia.com/gpu"] = str(gpus)
    n["status"]["allocatable"]["cpu"] = cpu
    n["status"]["allocatable"]["memory"] = memory
    if taints is not None:
        n["spec"]["taints"] = taints
    if cordoned:
        n["spec"]["unschedulable"] = True
    if not ready:
        for c in n["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = "False"
    return n


def pod(name: str, *, ns: str = "team-a", tenant: str | None = None, gang: str | None = None,
        size: int = 1, gpus: int = 1, milli: int = 1000, created: datetime = T0,
        qos: str | None = None, gated: bool = True, node_name: str | None = None,
        affinity_terms: list[dict[str, Any]] | None = None,
        extra_gates: tuple[str, ...] = (), cpu: str = "8",
        memory: str = "64Gi") -> dict[str, Any]:
    p = copy.deepcopy(_POD)
    m = p["metadata"]
    m["name"], m["namespace"], m["uid"] = name, ns, f"uid-{ns}-{name}"
    m["creationTimestamp"] = rfc3339(created)
    m["labels"]["berth.dev/tenant"] = tenant or ns
    ann = m["annotations"]
    if gang:
        m["labels"]["berth.dev/gang"] = gang
        ann["berth.dev/gang-name"] = gang
        ann["berth.dev/gang-size"] = str(size)
    else:
        del m["labels"]["berth.dev/gang"]
        for k in ("berth.dev/gang-name", "berth.dev/gang-size", "berth.dev/gang-source"):
            ann.pop(k)
    ann["berth.dev/gpu-count"] = str(gpus)
    ann["berth.dev/gpu-milli"] = str(milli)
    if qos:
        m["labels"]["berth.dev/qos-class"] = qos
    res = p["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        if milli == 1000:
            res[section]["nvidia.com/gpu"] = str(gpus)
        else:  # a share, as the webhook translates it for time-slicing (4 slots per GPU)
            del res[section]["nvidia.com/gpu"]
            res[section]["nvidia.com/gpu.shared"] = str(milli * 4 // 1000)
    if milli != 1000:
        ann["berth.dev/sharing"] = "time-slicing"
    res["requests"]["cpu"], res["requests"]["memory"] = cpu, memory
    res["limits"]["cpu"], res["limits"]["memory"] = cpu, memory
    gates = ([{"name": "berth.dev/admission"}] if gated else []) + [
        {"name": g} for g in extra_gates]
    if gates:
        p["spec"]["schedulingGates"] = gates
    else:
        p["spec"].pop("schedulingGates", None)
    if node_name:
        p["spec"]["nodeName"] = node_name
        p["status"] = {"phase": "Running", "conditions": [], "qosClass": "Burstable"}
    if affinity_terms is not None:
        p["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": affinity_terms}}}
    return p


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
