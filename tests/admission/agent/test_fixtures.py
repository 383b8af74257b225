"""Inventories as ``berth agent --once --print --json`` writes them still read back, and still
yield valid labels and solver GPUs.

Every fake machine's inventory is checked this way, and so is every inventory recorded on a
real machine and dropped into fixtures/ (see fixtures/README.md for how to record one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import inventory_of
from fake_nvml import MACHINES
from test_metadata import KEY, VALUE

from admission.agent import schema as s
from admission.agent.inventory import inventory_from_dict, inventory_to_dict
from admission.agent.metadata import to_node_metadata

RECORDED = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


def _cases() -> list[Any]:
    cases: list[Any] = [
        pytest.param(lambda name=name: inventory_to_dict(inventory_of(MACHINES[name]())),
                     id=f"fake-{name}")
        for name in sorted(MACHINES)
    ]
    cases += [pytest.param(lambda p=p: json.loads(p.read_text()), id=f"recorded-{p.name}")
              for p in RECORDED]
    return cases


@pytest.mark.parametrize("load", _cases())
def test_inventory_json_round_trip(load: Any) -> None:
    data = json.loads(json.dumps(load()))  # exactly what --json prints and a fixture holds
    inv = inventory_from_dict(data)
    assert inv.gpus, "the inventory lists no GPU"
    for g in inv.healthy_gpus:
        assert g.uuid.startswith("GPU-") and g.memory_mib > 0 and g.model
    meta = to_node_metadata(inv)
    for key, value in meta.labels.items():
        assert KEY.match(key) and VALUE.match(value), f"{key}={value!r}"
    gpus = s.gpus_from_annotation("node", meta.annotations[s.ANNOTATION_GPUS])
    assert len(gpus) == len(inv.healthy_gpus)
