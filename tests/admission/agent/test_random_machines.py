"""Random machines (link graphs, MIG layouts, unsupported queries, lost GPUs): the agent reads
every one, and what it derives holds together."""

from __future__ import annotations

import json

from conftest import inventory_of
from fake_nvml import GPU, SWITCH, FakeGpu, FakeMig, FakeNvml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_metadata import KEY, VALUE

from admission.agent import schema as s
from admission.agent.inventory import inventory_from_dict, inventory_to_dict
from admission.agent.metadata import to_node_metadata


@st.composite
def machines(draw: st.DrawFn) -> FakeNvml:
    n = draw(st.integers(1, 8))
    buses = [f"00000000:{0x10 + i:02x}:00.0" for i in range(n)]
    switches = [f"00000000:{0xe0 + i:02x}:00.0" for i in range(2)]
    gpus = []
    for i in range(n):
        nvlink = draw(st.booleans())
        remotes = draw(st.lists(st.sampled_from([*buses, *switches]), max_size=6)) if nvlink else []
        remotes = [r for r in remotes if r != buses[i]]
        mig_mode = draw(st.sampled_from([None, 0, 1]))
        migs = [FakeMig(gi_slices=g, memory_mb=g * 9728, sms=14 * g, uuid=f"MIG-{i}-{j}", gi_id=j)
                for j, g in enumerate(draw(st.lists(st.sampled_from([1, 2, 3, 4, 7]), max_size=4)))
                ] if mig_mode == 1 else []
        gpus.append(FakeGpu(
            name=draw(st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA L4", "Weird/Name (x)"])),
            uuid=f"GPU-{i}", memory_bytes=draw(st.integers(1 << 30, 200 << 30)), bus_id=buses[i],
            cc=draw(st.sampled_from([(9, 0), (8, 9), (11, 3)])),
            numa=draw(st.none() | st.integers(0, 3)), mig_mode=mig_mode, migs=migs,
            max_links=len(remotes) + draw(st.integers(0, 2)) if nvlink else 0,
            links={k: (r, SWITCH if r in switches else GPU) for k, r in enumerate(remotes)},
            power_mw=draw(st.none() | st.integers(0, 1_000_000)),
            limit_mw=draw(st.none() | st.integers(1, 1_000_000)),
            util=(draw(st.integers(0, 100)), draw(st.integers(0, 100))),
            lost=draw(st.booleans()) and draw(st.booleans()),
        ))
    return FakeNvml(gpus)


@settings(max_examples=60, deadline=None)
@given(machines())
def test_any_machine_reads_into_a_coherent_inventory(nvml: FakeNvml) -> None:
    inv = inventory_of(nvml)
    assert [g.index for g in inv.gpus] == list(range(len(nvml.gpus)))
    by_bus = {g.pci_bus_id: g for g in inv.healthy_gpus}
    for fake, g in zip(nvml.gpus, inv.gpus, strict=True):
        if fake.lost:
            assert g.error is not None
            continue
        assert g.nvlink_links == len(fake.links)
        assert (g.nvlink_domain is None) == (not fake.links and not any(
            fake.bus_id == r for other in nvml.gpus if not other.lost
            for r, _ in other.links.values()))
        for remote, kind in fake.links.values():
            if kind == GPU and remote in by_bus:
                assert by_bus[remote].nvlink_domain == g.nvlink_domain
        assert len(g.mig) == len(fake.migs)
        assert all(0 < m.milli <= 1000 for m in g.mig)
    assert inventory_from_dict(json.loads(json.dumps(inventory_to_dict(inv)))) == inv
    meta = to_node_metadata(inv)
    for key, value in meta.labels.items():
        assert KEY.match(key) and VALUE.match(value), f"{key}={value!r}"
    gpus = s.gpus_from_annotation("n", meta.annotations[s.ANNOTATION_GPUS])
    assert len(gpus) == len(inv.healthy_gpus)
