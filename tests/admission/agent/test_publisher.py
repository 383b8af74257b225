"""The publisher sends a patch only when the node's owned labels or annotations differ from what
the agent wants, at most once per interval, and backs off with jitter after failures."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import inventory_of
from fake_nvml import a100_mig, hgx_h100

from admission.agent import schema as s
from admission.agent.metadata import NodeMetadata, to_node_metadata
from admission.agent.publisher import Publisher, metadata_patch


class RecordingApi:
    """Holds one node, applies merge patches to it (None deletes) and records every call."""

    def __init__(self, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None) -> None:
        self.node: dict[str, Any] = {"metadata": {"name": "gpu-1", "labels": labels or {},
                                                  "annotations": annotations or {}}}
        self.calls: list[tuple[str, Any]] = []
        self.fail_next = 0

    def read_node(self, name: str) -> dict[str, Any]:
        self.calls.append(("read", name))
        self._maybe_fail()
        return copy.deepcopy(self.node)

    def patch_node(self, name: str, body: Any, *, field_manager: str) -> dict[str, Any]:
        assert field_manager == "berth-agent"
        self.calls.append(("patch", copy.deepcopy(body)))
        self._maybe_fail()
        for section, changes in body["metadata"].items():
            target = self.node["metadata"][section]
            for k, v in changes.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v
        return copy.deepcopy(self.node)

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("apiserver unreachable")

    @property
    def patches(self) -> list[Any]:
        return [body for kind, body in self.calls if kind == "patch"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def owns(key: str) -> bool:
    return s.is_agent_key(key) or s.is_gfd_key(key)


def make(api: RecordingApi, clock: Clock, **kw: Any) -> Publisher:
    return Publisher(api, "gpu-1", owns=owns, clock=clock, rng=lambda: 1.0, **kw)


def test_patches_once_then_stays_quiet_while_nothing_changes() -> None:
    api, clock = RecordingApi(labels={"kubernetes.io/hostname": "gpu-1"}), Clock()
    pub = make(api, clock)
    desired = to_node_metadata(inventory_of(hgx_h100()))
    assert pub.publish(desired).action == "patched"
    assert [k for k, _ in api.calls] == ["read", "patch"]
    assert api.node["metadata"]["labels"][s.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert api.node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-1"
    for _ in range(5):
        clock.now += 60
        assert pub.publish(to_node_metadata(inventory_of(hgx_h100()))).action == "unchanged"
    assert len(api.calls) == 2  # no reads, no patches in the steady state


def test_patch_carries_only_the_changed_keys_and_deletes_stale_ones() -> None:
    api, clock = RecordingApi(), Clock()
    pub = make(api, clock)
    nvml = a100_mig()
    pub.publish(to_node_metadata(inventory_of(nvml)))
    # The admin re-partitions GPU 1 from 2 x 3g.40gb to MIG off.
    nvml.gpus[1].mig_mode = 0
    nvml.gpus[1].migs = []
    clock.now += 60
    assert pub.publish(to_node_metadata(inventory_of(nvml))).action == "patched"
    patch = api.patches[-1]["metadata"]
    assert patch["labels"]["nvidia.com/mig-3g.40gb.count"] == "1"
    assert patch["labels"][s.LABEL_MIG_GPUS] == "1"
    assert s.GFD_PRODUCT not in patch["labels"]  # unchanged keys are not sent
    assert set(patch["annotations"]) <= {s.ANNOTATION_GPUS, s.ANNOTATION_USAGE}
    # Re-partition away the last 3g instance: its labels are deleted, not left behind.
    nvml.gpus[0].migs = nvml.gpus[0].migs[:4]
    clock.now += 60
    pub.publish(to_node_metadata(inventory_of(nvml)))
    patch = api.patches[-1]["metadata"]["labels"]
    assert patch["nvidia.com/mig-3g.40gb.count"] is None
    assert "nvidia.com/mig-3g.40gb.count" not in api.node["metadata"]["labels"]


def test_foreign_keys_are_never_touched() -> None:
    foreign = {"nvidia.com/mig.config": "all-1g.10gb", "berth.dev/managed": "true",
               "nvidia.com/gpu.deploy.driver": "true", "team": "ml"}
    api, clock = RecordingApi(labels=dict(foreign)), Clock()
    make(api, clock).publish(to_node_metadata(inventory_of(hgx_h100())))
    for k, v in foreign.items():
        assert api.node["metadata"]["labels"][k] == v
    assert all(k not in api.patches[0]["metadata"]["labels"] for k in foreign)


def test_changes_wait_for_the_minimum_interval() -> None:
    api, clock = RecordingApi(), Clock()
    pub = make(api, clock, min_interval_s=30)
    nvml = hgx_h100()
    pub.publish(to_node_metadata(inventory_of(nvml)))
    nvml.gpus[0].util = (95, 80)
    clock.now += 10
    result = pub.publish(to_node_metadata(inventory_of(nvml)))
    assert result.action == "deferred" and result.retry_in_s == pytest.approx(20)
    assert len(api.patches) == 1
    clock.now += 20
    assert pub.publish(to_node_metadata(inventory_of(nvml))).action == "patched"
    assert len(api.patches) == 2


def test_failures_back_off_exponentially_with_jitter() -> None:
    api, clock = RecordingApi(), Clock()
    api.fail_next = 3
    pub = make(api, clock, backoff_base_s=2, backoff_cap_s=5)
    desired = to_node_metadata(inventory_of(hgx_h100()))
    ceilings = []
    for _ in range(3):
        result = pub.publish(desired)
        assert result.action == "failed" and "apiserver unreachable" in (result.error or "")
        ceilings.append(result.retry_in_s)  # rng() == 1.0: the top of the jitter range
        calls = len(api.calls)
        assert pub.publish(desired).action == "backing-off"
        assert len(api.calls) == calls  # no traffic while backing off
        clock.now += result.retry_in_s
    assert ceilings == [2, 4, 5]  # doubling, capped
    assert pub.publish(desired).action == "patched"


def test_jitter_spreads_retries() -> None:
    api, clock = RecordingApi(), Clock()
    api.fail_next = 1
    pub = Publisher(api, "gpu-1", owns=owns, clock=clock, rng=lambda: 0.25, backoff_base_s=8)
    assert pub.publish(NodeMetadata(labels={"berth.dev/gpu-agent": "v1"})).retry_in_s == 2.0


def test_a_failure_makes_it_read_the_node_again() -> None:
    api, clock = RecordingApi(), Clock()
    pub = make(api, clock)
    desired = to_node_metadata(inventory_of(hgx_h100()))
    pub.publish(desired)
    api.node["metadata"]["labels"].pop(s.GFD_PRODUCT)  # someone edits the node
    api.fail_next = 1
    clock.now += 60
    desired2 = NodeMetadata(labels={**desired.labels, s.LABEL_HEALTHY_GPUS: "7"},
                            annotations=desired.annotations)
    assert pub.publish(desired2).action == "failed"
    clock.now += 600
    assert pub.publish(desired2).action == "patched"
    assert api.calls[-2][0] == "read"
    assert api.node["metadata"]["labels"][s.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"


def test_periodic_resync_repairs_edits_by_others() -> None:
    api, clock = RecordingApi(), Clock()
    pub = make(api, clock, resync_s=300)
    desired = to_node_metadata(inventory_of(hgx_h100()))
    pub.publish(desired)
    api.node["metadata"]["labels"][s.GFD_MEMORY] = "1"
    clock.now += 100
    assert pub.publish(desired).action == "unchanged"  # not yet re-read
    clock.now += 200
    assert pub.publish(desired).action == "patched"
    assert api.node["metadata"]["labels"][s.GFD_MEMORY] == "81559"


def test_metadata_patch_is_none_when_equal() -> None:
    desired = NodeMetadata(labels={"a/b": "1"}, annotations={"a/c": "x"})
    assert metadata_patch({"a/b": "1", "o": "2"}, {"a/c": "x"}, desired, owns) is None


def test_works_with_client_model_objects() -> None:
    class Meta:
        def __init__(self) -> None:
            self.labels = None
            self.annotations = {"x": "y"}

    class Node:
        def __init__(self) -> None:
            self.metadata = Meta()

    class Api:
        def __init__(self) -> None:
            self.bodies: list[Any] = []

        def read_node(self, name: str) -> Node:
            return Node()

        def patch_node(self, name: str, body: Any, *, field_manager: str) -> None:
            self.bodies.append(body)

    api = Api()
    clock = Clock()
    result = Publisher(api, "n", owns=owns, clock=clock).publish(
        NodeMetadata(labels={s.LABEL_AGENT: "v1"}))
    assert result.action == "patched"
    assert api.bodies == [{"metadata": {"labels": {s.LABEL_AGENT: "v1"}}}]
