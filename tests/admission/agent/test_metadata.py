"""From inventory to node labels and annotations, and back to the solver's GPUs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Callable

import pytest
from conftest import inventory_of
from fake_nvml import FakeNvml, a100_mig, hgx_h100, pcie_l4, two_islands
from hypothesis import given
from hypothesis import strategies as st

from admission.agent import schema as s
from admission.agent.metadata import infer_mig_strategy, label_value, to_node_metadata
from admission.agent.schema import NodeSchemaError, gpus_from_annotation

# Kubernetes' rules: a qualified key (optional DNS prefix, name <= 63) and a value <= 63 chars.
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?{NAME}$")
VALUE = re.compile(rf"^(|{NAME})$")


def test_every_label_is_valid_for_kubernetes(machine: Callable[[], FakeNvml]) -> None:
    meta = to_node_metadata(inventory_of(machine()))
    for key, value in meta.labels.items():
        assert KEY.match(key), key
        assert VALUE.match(value), f"{key}={value!r}"
    for key, value in meta.annotations.items():
        assert KEY.match(key), key
        json.loads(value)
    assert sum(len(v) for v in meta.annotations.values()) < 256 * 1024


def test_gfd_labels_of_an_hgx_node() -> None:
    labels = to_node_metadata(inventory_of(hgx_h100())).labels
    assert labels[s.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert labels[s.GFD_MEMORY] == "81559"
    assert labels[s.GFD_COUNT] == "8"
    assert labels[s.GFD_FAMILY] == "hopper"
    assert (labels[s.GFD_COMPUTE_MAJOR], labels[s.GFD_COMPUTE_MINOR]) == ("9", "0")
    assert (labels[s.GFD_DRIVER_MAJOR], labels[s.GFD_DRIVER_MINOR]) == ("550", "54")
    assert (labels[s.GFD_RUNTIME_MAJOR], labels[s.GFD_RUNTIME_MINOR]) == ("12", "4")
    assert labels[s.GFD_MIG_STRATEGY] == "none" and labels[s.GFD_MIG_CAPABLE] == "true"
    assert labels[s.LABEL_NVLINK_DOMAINS] == "1" and labels[s.LABEL_NVLINK_LARGEST] == "8"


def test_berth_labels_per_machine() -> None:
    def berth(nvml: FakeNvml) -> tuple[str, str, str]:
        lab = to_node_metadata(inventory_of(nvml)).labels
        return lab[s.LABEL_NVLINK_DOMAINS], lab[s.LABEL_NVLINK_LARGEST], lab[s.LABEL_MIG_GPUS]

    assert berth(two_islands()) == ("2", "4", "0")
    assert berth(pcie_l4()) == ("0", "0", "0")
    assert berth(a100_mig()) == ("1", "4", "2")


def test_mixed_mig_labels() -> None:
    inv = inventory_of(a100_mig())
    labels = to_node_metadata(inv).labels
    assert infer_mig_strategy(inv) == "mixed"
    assert labels[s.GFD_MIG_STRATEGY] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "4"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "3"
    assert labels["nvidia.com/mig-3g.40gb.memory"] == "40192"
    assert labels[s.GFD_COUNT] == "4"


def test_single_mig_strategy_relabels_the_product_like_gfd() -> None:
    nvml = a100_mig()
    for g in nvml.gpus:  # every GPU 7 x 1g.10gb
        g.mig_mode = 1
        g.migs = [dataclasses.replace(nvml.gpus[0].migs[0], uuid=f"MIG-{i}") for i in range(7)]
    inv = inventory_of(nvml)
    labels = to_node_metadata(inv).labels
    assert infer_mig_strategy(inv) == "single"
    assert labels[s.GFD_PRODUCT] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert labels[s.GFD_COUNT] == "28"
    assert labels[s.GFD_MEMORY] == "9728"


def test_gfd_labels_can_be_left_to_gfd() -> None:
    meta = to_node_metadata(inventory_of(hgx_h100()), gfd_labels=False)
    assert not any(k.startswith("nvidia.com/") for k in meta.labels)
    assert meta.labels[s.LABEL_AGENT] == s.SCHEMA_VERSION


def test_readings_are_quantised_so_small_wobbles_change_nothing() -> None:
    a, b = hgx_h100(), hgx_h100()
    for g in b.gpus:
        g.util = (g.util[0] + 1, g.util[1] - 2)  # 43 -> 44 and 21 -> 19: same 10 % step
    assert to_node_metadata(inventory_of(a)) == to_node_metadata(inventory_of(b))
    for g in b.gpus:
        g.util = (90, 70)
    changed = to_node_metadata(inventory_of(b))
    assert changed != to_node_metadata(inventory_of(a))
    usage = json.loads(changed.annotations[s.ANNOTATION_USAGE])
    assert usage[0] == {"index": 0, "sm_pct": 90, "membw_pct": 70, "power_w": 300}


def test_usage_can_be_left_out() -> None:
    meta = to_node_metadata(inventory_of(hgx_h100()), usage=False)
    assert s.ANNOTATION_USAGE not in meta.annotations


def test_bad_options_are_refused() -> None:
    inv = inventory_of(pcie_l4())
    with pytest.raises(ValueError, match="mig_strategy"):
        to_node_metadata(inv, mig_strategy="sometimes")
    with pytest.raises(ValueError, match="util_step_pct"):
        to_node_metadata(inv, util_step_pct=0)


def test_label_value_sanitises() -> None:
    assert label_value("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert label_value(" (weird) name/with:stuff ") == "weird--name-with-stuff"
    assert len(label_value("x" * 100)) == 63


@given(st.text(max_size=80))
def test_label_value_is_always_valid(text: str) -> None:
    assert VALUE.match(label_value(text))


# --------------------------------------------------------------------------------------------
# The controller's side
# --------------------------------------------------------------------------------------------


def test_annotation_reads_back_as_solver_gpus() -> None:
    inv = inventory_of(a100_mig())
    raw = to_node_metadata(inv).annotations[s.ANNOTATION_GPUS]
    gpus = gpus_from_annotation("node-a", raw)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0].model == "NVIDIA A100-SXM4-80GB"
    assert gpus[0].nvlink_domain == "node-a/nvl0"  # unique across the cluster
    assert [(m.profile, m.milli, m.memory_mib) for m in gpus[1].mig] == [
        ("3g.40gb", 428, 40192), ("3g.40gb", 428, 40192)]
    assert gpus[2].mig == ()
    islands = gpus_from_annotation("n", to_node_metadata(inventory_of(two_islands()))
                                   .annotations[s.ANNOTATION_GPUS])
    assert {g.nvlink_domain for g in islands} == {"n/nvl0", "n/nvl1"}
    pcie = gpus_from_annotation("n", to_node_metadata(inventory_of(pcie_l4()))
                                .annotations[s.ANNOTATION_GPUS])
    assert all(g.nvlink_domain is None for g in pcie)


def test_lost_gpus_are_not_offered_to_the_solver() -> None:
    nvml = hgx_h100()
    nvml.gpus[5].lost = True
    meta = to_node_metadata(inventory_of(nvml))
    assert meta.labels[s.LABEL_HEALTHY_GPUS] == "7"
    assert meta.labels[s.GFD_COUNT] == "8"
    gpus = gpus_from_annotation("n", meta.annotations[s.ANNOTATION_GPUS])
    assert [g.index for g in gpus] == [0, 1, 2, 3, 4, 6, 7]


def test_bad_annotation_names_key_and_field() -> None:
    with pytest.raises(NodeSchemaError, match=r"berth\.dev/gpus: not JSON"):
        gpus_from_annotation("n", "{")
    with pytest.raises(NodeSchemaError, match=r"berth.dev/gpus\[0\]\.model"):
        gpus_from_annotation("n", '[{"index": 0, "memory_mib": 1, "mig": []}]')
    with pytest.raises(NodeSchemaError, match=r"gpus\[0\]\.mig\[0\].*milli"):
        gpus_from_annotation("n", '[{"index": 0, "model": "x", "memory_mib": 1, '
                                  '"mig": [{"profile": "1g", "milli": 5000, "memory_mib": 1}]}]')


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                    lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.sampled_from(["index", "model", "memory_mib", "mig",
                                                       "nvlink_domain", "error", "milli",
                                                       "profile"]), c, max_size=6),
                    max_leaves=25))
def test_random_annotation_never_crashes(value: object) -> None:
    with contextlib.suppress(NodeSchemaError):
        gpus_from_annotation("n", json.dumps(value))


def test_ownership_is_exact() -> None:
    assert s.is_gfd_key("nvidia.com/gpu.product")
    assert s.is_gfd_key("nvidia.com/mig-1g.10gb.count")
    assert not s.is_gfd_key("nvidia.com/mig.config")  # the MIG manager's
    assert not s.is_gfd_key("nvidia.com/gpu.deploy.driver")  # the GPU operator's
    assert s.is_agent_key(s.ANNOTATION_GPUS)
    assert not s.is_agent_key("berth.dev/managed")  # the webhook's
