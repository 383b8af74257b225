"""From the agent's published readings to refined QoS profiles, end to end on a fake machine."""

from __future__ import annotations

import pytest
from conftest import inventory_of
from fake_nvml import a100_mig, hgx_h100

from admission.agent import schema as s
from admission.agent.metadata import to_node_metadata
from admission.agent.refine import solo_samples, usage_from_annotation
from admission.agent.schema import NodeSchemaError
from solver.interference import refine_profiles, resolve_profiles


def test_solo_readings_refine_the_class_profile() -> None:
    nvml = hgx_h100()
    nvml.gpus[0].util = (88, 62)  # GPU 0 runs one training pod
    nvml.gpus[1].util = (97, 90)  # GPU 1 runs training next to batch inference: not solo
    raw = to_node_metadata(inventory_of(nvml)).annotations[s.ANNOTATION_USAGE]
    usage = usage_from_annotation(raw)
    assert usage[0] == (0.9, 0.6)  # quantised to 10 %
    samples = solo_samples(usage, {0: ["training"], 1: ["training", "batch-inference"],
                                   2: [None], 3: ["training", "training"], 4: []})
    assert [(x.qos_class, x.sm, x.membw) for x in samples] == [("training", 0.9, 0.6)]
    before = resolve_profiles()
    after = refine_profiles(before, samples, alpha=0.5)
    assert after["training"].sm == pytest.approx((before["training"].sm + 0.9) / 2)
    assert after["training"].memory_mib == before["training"].memory_mib


def test_gpus_without_readings_teach_nothing() -> None:
    raw = to_node_metadata(inventory_of(a100_mig())).annotations[s.ANNOTATION_USAGE]
    usage = usage_from_annotation(raw)
    assert set(usage) == {2, 3}  # the MIG-enabled GPUs have no whole-GPU utilisation
    assert solo_samples(usage, {0: ["interactive"]}) == []


@pytest.mark.parametrize("raw, where", [
    ("nope", "not JSON"),
    ("{}", "must be a JSON list"),
    ('[{"sm_pct": 1, "membw_pct": 1}]', r"\[0\]\.index"),
    ('[{"index": 0, "sm_pct": 140, "membw_pct": 1}]', r"\[0\]\.sm_pct"),
    ('[{"index": 0, "sm_pct": 1, "membw_pct": "x"}]', r"\[0\]\.membw_pct"),
])
def test_bad_usage_annotation_names_the_field(raw: str, where: str) -> None:
    with pytest.raises(NodeSchemaError, match=where):
        usage_from_annotation(raw)
