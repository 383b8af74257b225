"""Inventories recorded on real machines (fixtures/*.json) still read, and still yield valid
labels and solver GPUs. See fixtures/README.md for how to record one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_metadata import KEY, VALUE

from admission.agent import schema as s
from admission.agent.inventory import inventory_from_dict
from admission.agent.metadata import to_node_metadata

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


@pytest.mark.skipif(not FIXTURES, reason="no real-device inventory recorded yet "
                    "(needs a machine with an NVIDIA GPU; see tests/agent/fixtures/README.md)")
@pytest.mark.parametrize("path", FIXTURES or [Path("none")], ids=lambda p: p.name)
def test_real_inventory(path: Path) -> None:
    inv = inventory_from_dict(json.loads(path.read_text()))
    assert inv.gpus, f"{path.name} lists no GPU"
    for g in inv.healthy_gpus:
        assert g.uuid.startswith("GPU-") and g.memory_mib > 0 and g.model
    meta = to_node_metadata(inv)
    for key, value in meta.labels.items():
        assert KEY.match(key) and VALUE.match(value), f"{key}={value!r}"
    gpus = s.gpus_from_annotation("node", meta.annotations[s.ANNOTATION_GPUS])
    assert len(gpus) == len(inv.healthy_gpus)
