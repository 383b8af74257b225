"""Reading GPUs through NVML: the real agent code against fake machines that answer like the
hardware does, including its errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import pynvml
import pytest
from conftest import inventory_of
from fake_nvml import FakeNvml, a100_mig, hgx_h100, pcie_l4, two_islands
from hypothesis import given
from hypothesis import strategies as st

from admission.agent.inventory import (
    FORMAT,
    InventoryFormatError,
    NvmlUnavailable,
    inventory_from_dict,
    inventory_to_dict,
    nvml_session,
    read_inventory,
)
from admission.agent.topology import normalise_bus_id, nvlink_domains


def test_hgx_h100_is_one_nvlink_domain_through_the_switches() -> None:
    inv = inventory_of(hgx_h100())
    assert inv.driver_version == "550.54.15"
    assert inv.cuda_driver_version == "12.4"
    assert len(inv.gpus) == 8
    for g in inv.gpus:
        assert g.model == "NVIDIA H100 80GB HBM3"
        assert g.memory_mib == 81559
        assert g.compute_capability == "9.0"
        assert g.nvlink_domain == "nvl0"
        assert g.nvlink_links == 18 and g.nvlink_switch_links == 18
        assert g.nvlink_gpu_peers == ()  # every link ends at a switch
        assert (g.mig_capable, g.mig_enabled, g.mig) == (True, False, ())
        assert g.power_limit_w == 700.0
        assert g.utilisation_sm_pct == 43 and g.utilisation_membw_pct == 21
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inv.gpus[1].pci_bus_id == "00000000:2a:00.0"
    assert len({g.uuid for g in inv.gpus}) == 8


def test_a100_mig_instances_and_their_shares() -> None:
    inv = inventory_of(a100_mig())
    g0, g1, g2, _ = inv.gpus
    assert g0.mig_enabled and g1.mig_enabled and not g2.mig_enabled and g2.mig_capable
    assert [m.profile for m in g0.mig] == ["1g.10gb"] * 4 + ["3g.40gb"]
    assert [m.milli for m in g0.mig] == [142] * 4 + [428]  # slices of 7
    assert [m.gpu_instance_id for m in g0.mig] == [9, 10, 11, 12, 2]
    assert [m.profile for m in g1.mig] == ["3g.40gb", "3g.40gb"]
    assert g0.mig[0].memory_mib == 9728 and g0.mig[0].multiprocessors == 14
    # NVML has no whole-GPU utilisation for a MIG-enabled GPU: absent, not an error.
    assert g0.utilisation_sm_pct is None and g2.utilisation_sm_pct == 40


def test_pcie_l4_has_no_nvlink_no_mig_and_no_numa_from_an_old_driver() -> None:
    inv = inventory_of(pcie_l4())
    for g in inv.gpus:
        assert g.nvlink_domain is None and g.nvlink_links == 0
        assert (g.mig_capable, g.mig_enabled) == (False, False)
        assert g.numa_node is None  # nvmlDeviceGetNumaNodeId: Function Not Found
        assert g.memory_mib == 23034
    assert inv.cuda_driver_version == "11.4"


def test_two_islands_are_two_domains_with_direct_peers() -> None:
    inv = inventory_of(two_islands())
    assert [g.nvlink_domain for g in inv.gpus] == ["nvl0"] * 4 + ["nvl1"] * 4
    assert inv.gpus[0].nvlink_gpu_peers == (1, 2, 3)
    assert inv.gpus[5].nvlink_gpu_peers == (4, 6, 7)
    assert all(g.nvlink_links == 6 and g.nvlink_switch_links == 0 for g in inv.gpus)


def test_links_stop_at_the_last_link_of_the_gpu() -> None:
    nvml = two_islands()
    inventory_of(nvml)
    # V100 has 6 links: the agent asks links 0..6 (the 7th answers Invalid Argument), no more.
    asked = nvml.calls.count("nvmlDeviceGetNvLinkState")
    assert asked == 8 * 7


def test_pcie_gpu_costs_one_nvlink_query() -> None:
    nvml = pcie_l4()
    inventory_of(nvml)
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 4


def test_a_lost_gpu_is_reported_not_hidden() -> None:
    nvml = hgx_h100()
    nvml.gpus[3].lost = True
    inv = inventory_of(nvml)
    assert len(inv.gpus) == 8
    assert inv.gpus[3].error is not None and "lost" in inv.gpus[3].error.lower()
    assert len(inv.healthy_gpus) == 7
    assert {g.nvlink_domain for g in inv.healthy_gpus} == {"nvl0"}


def test_missing_library_is_a_clear_error() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML"), nvml_session(FakeNvml([], library=False)):
        pass


def test_reading_without_init_fails_like_nvml() -> None:
    with pytest.raises(pynvml.NVMLError) as info:
        read_inventory(hgx_h100())
    assert info.value.value == pynvml.NVML_ERROR_UNINITIALIZED


def test_session_shuts_nvml_down() -> None:
    nvml = pcie_l4()
    inventory_of(nvml)
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"
    assert not nvml.initialised


def test_json_form_round_trips(machine: Callable[[], FakeNvml]) -> None:
    inv = inventory_of(machine())
    data = json.loads(json.dumps(inventory_to_dict(inv)))
    assert data["format"] == FORMAT
    assert inventory_from_dict(data) == inv


def test_json_form_names_the_bad_field() -> None:
    data = inventory_to_dict(inventory_of(a100_mig()))
    data["gpus"][1]["mig"][0]["milli"] = "lots"
    with pytest.raises(InventoryFormatError, match=r"inventory\.gpus\[1\]\.mig\[0\]\.milli"):
        inventory_from_dict(data)
    data = inventory_to_dict(inventory_of(a100_mig()))
    del data["gpus"][0]["uuid"]
    with pytest.raises(InventoryFormatError, match=r"gpus\[0\]\.uuid: missing"):
        inventory_from_dict(data)
    with pytest.raises(InventoryFormatError, match="format"):
        inventory_from_dict({"format": "something-else/v9", "gpus": []})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_random_json_is_rejected_cleanly(value: object) -> None:
    with contextlib.suppress(InventoryFormatError):
        inventory_from_dict(value)


@given(st.sampled_from(["index", "uuid", "mig", "nvlink_gpu_peers", "numa_node", "error"]),
       json_values)
def test_a_corrupted_field_is_rejected_or_read(key: str, value: object) -> None:
    data = inventory_to_dict(inventory_of(two_islands()))
    data["gpus"][2][key] = value
    try:
        inventory_from_dict(data)
    except InventoryFormatError as exc:
        assert "gpus[2]" in str(exc)


def test_bus_ids_compare_across_domain_widths() -> None:
    assert normalise_bus_id(b"00000000:1A:00.0\x00") == normalise_bus_id("0000:1a:00.0")


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.lists(st.sampled_from("abcdefghST")),
                       max_size=8))
def test_nvlink_domains_are_the_connected_components(links: dict[str, list[str]]) -> None:
    domains = nvlink_domains(links)
    where = {gpu: i for i, d in enumerate(domains) for gpu in d}
    assert sum(len(d) for d in domains) == len(where)  # disjoint
    for gpu, remotes in links.items():
        if remotes:
            assert gpu in where
        for r in remotes:
            if r in links:
                assert where[gpu] == where[r]
    # Two GPUs reaching the same switch are in one domain.
    via_switch: dict[str, set[int]] = {}
    for gpu, remotes in links.items():
        for r in remotes:
            via_switch.setdefault(r, set()).add(where[gpu])
    assert all(len(ds) == 1 for ds in via_switch.values())
