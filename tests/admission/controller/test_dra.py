"""The controller with GPUs through DRA: nodes that publish ResourceSlices, pods whose GPUs come
from ResourceClaims, what allocated claims hold, and the demand read again from the claims."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from admission import constants as c
from admission.controller.snapshot import GangState, build
from admission.dra.slices import mig_milli, node_devices
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gates, pinned_node, settings
from tests.admission.controller.objects import T0, FakeClock, node, pod

A100 = "NVIDIA A100-SXM4-80GB"  # as the DRA driver publishes it
A100_LABEL = "NVIDIA-A100-SXM4-80GB"  # as GPU Feature Discovery and the policy write it


def slice_of(node_name: str, gpus: int, *, model: str = A100, generation: int = 1,
             mig: list[tuple[int, str]] | None = None) -> dict[str, Any]:
    devices: list[dict[str, Any]] = []
    for i in range(gpus):
        devices.append({"name": f"gpu-{i}", "attributes": {
            "type": {"string": "gpu"}, "productName": {"string": model},
            "uuid": {"string": f"GPU-{node_name}-{i}"}},
            "capacity": {"memory": {"value": "80Gi"}}})
    for parent, profile in mig or []:
        devices.append({"name": f"gpu-{parent}-mig-{profile}", "attributes": {
            "type": {"string": "mig"}, "productName": {"string": model},
            "profile": {"string": profile}, "parentUUID": {"string": f"GPU-{node_name}-{parent}"},
            "uuid": {"string": f"MIG-{node_name}-{parent}-{profile}"}}})
    return {"metadata": {"name": f"{node_name}-gpu.nvidia.com-{generation}"},
            "spec": {"driver": c.DRA_DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": generation,
                              "resourceSliceCount": 1},
                     "devices": devices}}


def slice_only_node(name: str) -> dict[str, Any]:
    """A node whose GPUs are managed by DRA alone: no nvidia.com/gpu in allocatable."""
    n = node(name, gpus=0)
    for section in ("capacity", "allocatable"):
        n["status"][section].pop("nvidia.com/gpu", None)
    n["metadata"]["labels"].pop("nvidia.com/gpu.product", None)
    return n


def claim_spec(count: int = 1, cls: str = c.DRA_GPU_CLASS) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": cls, "count": count}}]}}


def claim(name: str, count: int = 1, *, ns: str = "team-a", node_name: str | None = None,
          devices: list[str] | None = None, pods: list[str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": ns},
                           "spec": claim_spec(count)}
    if node_name is not None:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": c.DRA_DRIVER, "pool": node_name, "device": d}
            for d in devices or []]}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{ns}-{p}"}
                            for p in pods or []]}
    return obj


def dra_pod(name: str, gpus: int, *, template: str | None = None, claim_name: str | None = None,
            generated: str | None = None, milli: int = 1000, **kw: Any) -> dict[str, Any]:
    """A pod as the webhook admits it when its GPUs come from a claim."""
    p = pod(name, gpus=gpus, **kw)
    ann = p["metadata"]["annotations"]
    ann[c.ANNOTATION_SHARING] = "dra"
    ann[c.ANNOTATION_GPU_MILLI] = str(milli)
    res = p["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        res[section].pop("nvidia.com/gpu", None)
    res["claims"] = [{"name": "gpu"}]
    ref: dict[str, str] = {"name": "gpu"}
    if template is not None:
        ref["resourceClaimTemplateName"] = template
    else:
        ref["resourceClaimName"] = claim_name or f"{name}-gpu"
    p["spec"]["resourceClaims"] = [ref]
    if generated is not None:
        p.setdefault("status", {})["resourceClaimStatuses"] = [
            {"name": "gpu", "resourceClaimName": generated}]
    return p


def test_slices_give_gpus_models_and_mig_shares() -> None:
    devices = node_devices([slice_of("n0", 2, mig=[(1, "3g.40gb")]),
                            slice_of("n0", 4, generation=0)])  # an older generation: ignored
    n0 = devices["n0"]
    assert [g.name for g in n0.gpus] == ["gpu-0", "gpu-1"]
    assert {g.model for g in n0.gpus} == {A100_LABEL}
    assert n0.gpus[0].memory_mib == 80 * 1024
    assert [m.profile for m in n0.mig["GPU-n0-1"]] == ["3g.40gb"]
    assert mig_milli("3g.40gb") == 429 and mig_milli("7g.80gb") == 1000 and mig_milli("x") == 0


def test_a_node_that_publishes_only_slices_receives_work() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 4))
    api.add_dra("resourceclaims", claim("t0-gpu", 2))
    api.add_pod(dra_pod("t0", 2))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    report = ctl.run_cycle()
    assert report.admitted == 1, report
    assert gates(api, "team-a/t0") == [] and pinned_node(api, "team-a/t0") == "dra-0"


def test_demand_is_read_again_from_the_claim() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))
    api.add_dra("resourceclaims", claim("t0-gpu", 4))  # the claim asks for 4
    api.add_pod(dra_pod("t0", 1))  # the pod says 1
    ctl = controller(api, FakeClock())
    built = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    (info,) = built.gangs.values()
    assert info.state == GangState.BROKEN
    assert "is not what its ResourceClaims ask for (4 GPUs" in (info.error or "")


def test_a_template_pod_waits_for_its_claim_then_is_checked_against_it() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))
    api.add_pod(dra_pod("t0", 2, template="two-gpus"))
    ctl = controller(api, FakeClock())
    built = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    (info,) = built.gangs.values()
    assert info.state == GangState.INCOMPLETE and "not created yet" in (info.error or "")
    # the resource claim controller made the claim: it is the claim that counts
    api.add_dra("resourceclaims", claim("t0-gpu-abcde", 2))
    api.pods["team-a/t0"]["status"] = {"resourceClaimStatuses": [
        {"name": "gpu", "resourceClaimName": "t0-gpu-abcde"}]}
    ctl.relist()
    built = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    (info,) = built.gangs.values()
    assert info.state == GangState.PENDING, info.error


def test_allocated_claims_hold_their_devices_and_a_shared_claim_counts_once() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))
    # two running pods of one gang share a claim of 2 GPUs; another claim is allocated to a
    # pod the controller does not see (another scheduler's): both hold their devices
    api.add_dra("resourceclaims", claim("shared", 2, node_name="dra-0",
                                        devices=["gpu-0", "gpu-1"], pods=["r0", "r1"]))
    api.add_dra("resourceclaims", claim("elsewhere", 3, ns="team-b", node_name="dra-0",
                                        devices=["gpu-2", "gpu-3", "gpu-4"]))
    for name in ("r0", "r1"):
        api.add_pod(dra_pod(name, 2, claim_name="shared", gated=False, node_name="dra-0"))
    api.add_pod(dra_pod("t0", 3))
    api.add_dra("resourceclaims", claim("t0-gpu", 3))
    ctl = controller(api, FakeClock())
    built = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    held = {r.name: sorted(s.index for s in r.gpus) for r in built.snapshot.running}
    assert sorted(held["team-a/r0"] + held["team-a/r1"]) == [0, 1]
    assert held["resourceclaim/team-b/elsewhere"] == [2, 3, 4]
    tenants = {r.name: r.tenant for r in built.snapshot.running}
    assert tenants["resourceclaim/team-b/elsewhere"] == "team-b"
    # 3 GPUs left: the pending 3-GPU pod fits, a fourth would not
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 1


def test_quota_counts_claims_and_device_plugin_gpus_together() -> None:
    from solver.types import Tenant

    api = FakeApi()
    api.add_node(node("plugin-0", gpus=8))
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))
    # team-a runs 4 device-plugin GPUs and holds a 3-GPU claim: with a quota of 8 and no
    # borrowing, a 2-GPU claim pod must wait, a 1-GPU one fits
    api.add_pod(pod("plugin-run", gpus=4, gated=False, node_name="plugin-0"))
    api.add_dra("resourceclaims", claim("held", 3, node_name="dra-0",
                                        devices=["gpu-0", "gpu-1", "gpu-2"]))
    api.add_pod(dra_pod("big", 2))
    api.add_dra("resourceclaims", claim("big-gpu", 2))
    s = settings(tenants=(Tenant("team-a", quota_milli=8000, can_borrow=False),
                          Tenant("team-b")))
    clock = FakeClock()
    ctl = controller(api, clock, s=s)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 0
    assert c.SCHEDULING_GATE in gates(api, "team-a/big")
    small = copy.deepcopy(claim("small-gpu", 1))
    api.add_dra("resourceclaims", small)
    api.add_pod(dra_pod("small", 1))
    ctl.relist()
    clock.advance(10)
    report = ctl.run_cycle()
    assert [r.gang for r in report.released] == ["team-a/small"], report


def test_dra_pods_get_dra_gpus_and_device_plugin_pods_get_theirs_on_one_node() -> None:
    # one node with 2 device-plugin GPUs and 2 DRA GPUs: two 2-GPU pods of each kind fit
    # exactly, each on its own kind (a plugin pod on a DRA GPU would never be bound)
    api = FakeApi()
    api.add_node(node("mixed", gpus=2))
    api.add_dra("resourceslices", slice_of("mixed", 2))
    api.add_pod(pod("plugin", gpus=2))
    api.add_pod(dra_pod("claims", 2))
    api.add_dra("resourceclaims", claim("claims-gpu", 2))
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    models = {p.name: p.models for g in built.snapshot.gangs for p in g.pods}
    assert models["team-a/claims"] == {A100_LABEL + "@dra"}
    assert models["team-a/plugin"] == {"NVIDIA-H100-80GB-HBM3"}
    clock.advance(10)
    assert ctl.run_cycle().admitted == 2
    plugin = api.pods["team-a/plugin"]["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_GPUS]
    claims = api.pods["team-a/claims"]["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_GPUS]
    assert sorted(plugin.split(",")) == ["0", "1"] and sorted(claims.split(",")) == ["2", "3"]


def test_a_device_plugin_pod_never_lands_on_a_slice_only_node() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))
    api.add_pod(pod("plugin", gpus=1))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 0
    assert c.SCHEDULING_GATE in gates(api, "team-a/plugin")


def test_a_gpu_in_mig_mode_takes_mig_pods_and_no_whole_gpu_pod() -> None:
    # dra-0's only GPU is in MIG mode (two 3g.40gb devices): a whole-GPU claim pod must wait,
    # two MIG pods fit on it
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 0, mig=[(0, "3g.40gb"), (0, "3g.40gb")]))
    api.add_pod(dra_pod("whole", 1))
    api.add_dra("resourceclaims", claim("whole-gpu", 1))
    for name in ("m0", "m1"):
        api.add_pod(dra_pod(name, 1, milli=mig_milli("3g.40gb")))
        mig_claim = claim(f"{name}-gpu", 1)
        mig_claim["spec"]["devices"]["requests"][0]["exactly"].update(
            deviceClassName=c.DRA_MIG_CLASS,
            selectors=[{"cel": {"expression":
                                'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'}}])
        api.add_dra("resourceclaims", mig_claim)
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    report = ctl.run_cycle()
    assert sorted(r.gang for r in report.released) == ["team-a/m0", "team-a/m1"], report
    assert c.SCHEDULING_GATE in gates(api, "team-a/whole")


def test_a_pod_forging_the_dra_keys_over_device_plugin_gpus_is_never_released() -> None:
    # Berth's keys say its GPUs come from claims, but it asks for nvidia.com/gpu and names no
    # claim (keys the webhook never wrote): not believed, never released
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    forged = pod("forged", gpus=2)
    forged["metadata"]["annotations"][c.ANNOTATION_SHARING] = "dra"
    api.add_pod(forged)
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (info,) = built.gangs.values()
    assert info.state == GangState.BROKEN
    assert "also requests nvidia.com/gpu: 2" in (info.error or "")
    clock.advance(10)
    assert ctl.run_cycle().admitted == 0


def test_a_claim_shared_by_a_gang_is_charged_once_and_keeps_the_gang_on_its_node() -> None:
    # two pods of one gang name one 4-GPU claim: 4 GPUs, not 8, on one node (dra-1's 2 GPUs
    # would not do; charged twice, 8 GPUs would not fit in the 6 there are)
    api = FakeApi()
    for name, gpus in (("dra-0", 4), ("dra-1", 2)):
        api.add_node(slice_only_node(name))
        api.add_dra("resourceslices", slice_of(name, gpus))
    api.add_dra("resourceclaims", claim("shared", 4))
    for i in range(2):
        api.add_pod(dra_pod(f"w{i}", 4, claim_name="shared", gang="ring", size=2))
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (gang,) = built.snapshot.gangs
    assert sorted(p.gpu_count for p in gang.pods) == [0, 4]
    clock.advance(10)
    assert ctl.run_cycle().admitted == 1
    assert {pinned_node(api, f"team-a/w{i}") for i in range(2)} == {"dra-0"}


def test_a_pod_joining_an_allocated_claim_goes_to_its_node_and_takes_nothing_more() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 2))
    api.add_node(slice_only_node("dra-1"))
    api.add_dra("resourceslices", slice_of("dra-1", 8))
    api.add_dra("resourceclaims", claim("shared", 2, node_name="dra-0",
                                        devices=["gpu-0", "gpu-1"], pods=["r0"]))
    api.add_pod(dra_pod("r0", 2, claim_name="shared", gated=False, node_name="dra-0"))
    api.add_pod(dra_pod("late", 2, claim_name="shared"))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 1
    assert pinned_node(api, "team-a/late") == "dra-0"  # full, but the claim is there


def mapping_class() -> dict[str, Any]:
    """The GPU DeviceClass mapping nvidia.com/gpu to DRA devices (extendedResourceName)."""
    return {"metadata": {"name": c.DRA_GPU_CLASS},
            "spec": {"extendedResourceName": c.RESOURCE_GPU}}


def test_nvidia_gpu_mapped_to_dra_may_use_dra_gpus_and_is_counted_once() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 4))
    api.add_dra("deviceclasses", mapping_class())
    # a running nvidia.com/gpu pod whose 2 GPUs the scheduler took from DRA devices (its
    # extended resource claim): held once, through the claim
    runner = pod("runner", gpus=2, gated=False, node_name="dra-0")
    runner["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "runner-ext"}
    api.add_pod(runner)
    api.add_dra("resourceclaims", claim("runner-ext", 2, node_name="dra-0",
                                        devices=["gpu-0", "gpu-1"], pods=["runner"]))
    api.add_pod(pod("next", gpus=2))
    api.add_pod(pod("too-many", gpus=1, created=T0 + timedelta(seconds=1)))
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    held = {r.name: sorted(s.index for s in r.gpus) for r in built.snapshot.running}
    assert held == {"team-a/runner": [0, 1]}
    clock.advance(10)
    report = ctl.run_cycle()
    assert [r.gang for r in report.released] == ["team-a/next"], report
    assert pinned_node(api, "team-a/next") == "dra-0"


def test_the_policys_gpu_model_watts_hold_for_dra_gpus() -> None:
    from admission.policy import load_policy, to_solver
    from tests.admission.webhook.review_helpers import SAMPLE

    policy = load_policy(SAMPLE)
    solver_policy, _ = to_solver(policy)
    for m in policy.gpu_models:
        for name in (m.name + "@dra", m.name + "@dra-mig"):
            assert solver_policy.idle_watts[name] == m.idle_watts
            assert solver_policy.active_watts[name] == m.active_watts


# ---------------------------------------------------------------- shares by consumable capacity
def shared_slice(node_name: str, gpus: int, *,
                 policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """``gpus`` GPUs that claims may share by their memory (allowMultipleAllocations)."""
    s = slice_of(node_name, gpus)
    for dev in s["spec"]["devices"]:
        dev["allowMultipleAllocations"] = True
        if policy is not None:
            dev["capacity"]["memory"]["requestPolicy"] = policy
    return s


def share_claim(name: str, memory: str, *, node_name: str | None = None,
                device: str = "gpu-0", consumed: str | None = None) -> dict[str, Any]:
    obj = claim(name, 1, node_name=node_name, devices=[device] if node_name else None)
    obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"memory": memory}}
    if node_name is not None:
        (result,) = obj["status"]["allocation"]["devices"]["results"]
        result["consumedCapacity"] = {"memory": consumed or memory}
    return obj


def share_pod(name: str, memory_mib: int, milli: int, **kw: Any) -> dict[str, Any]:
    """A pod as the webhook admits it when its claim asks for ``memory_mib`` by capacity."""
    p = dra_pod(name, 1, milli=milli, **kw)
    p["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_MIB] = str(memory_mib)
    return p


def released(api: FakeApi, key: str) -> tuple[str | None, str | None]:
    """(node, GPU indexes) Berth wrote on a released pod; (None, None) while gated."""
    if c.SCHEDULING_GATE in gates(api, key):
        return None, None
    ann = api.pods[key]["metadata"]["annotations"]
    return pinned_node(api, key), ann.get(c.ANNOTATION_ASSIGNED_GPUS)


def test_slices_read_shared_devices_and_their_request_policy() -> None:
    step = {"default": "8Gi", "validRange": {"min": "8Gi", "max": "80Gi", "step": "8Gi"}}
    (gpu,) = node_devices([shared_slice("n0", 1, policy=step)])["n0"].gpus
    assert gpu.shared and gpu.valid_range == (8192, 81920, 8192)
    assert gpu.consumed_mib(1) == 8192 and gpu.consumed_mib(20 * 1024) == 24 * 1024
    assert gpu.consumed_mib(81 * 1024) is None
    values = {"default": "10Gi", "validValues": ["10Gi", "40Gi", "80Gi"]}
    (gpu,) = node_devices([shared_slice("n0", 1, policy=values)])["n0"].gpus
    assert gpu.consumed_mib(11 * 1024) == 40 * 1024 and gpu.consumed_mib(90 * 1024) is None
    (gpu,) = node_devices([shared_slice("n0", 1)])["n0"].gpus
    assert gpu.consumed_mib(40 * 1024) == 40 * 1024 and gpu.consumed_mib(81 * 1024) is None
    (plain,) = node_devices([slice_of("n0", 1)])["n0"].gpus
    assert not plain.shared


def test_two_shares_by_capacity_meet_on_one_shared_gpu_and_a_third_waits() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", shared_slice("dra-0", 1))
    for i in range(3):
        api.add_pod(share_pod(f"s{i}", 40 * 1024, 500))
        api.add_dra("resourceclaims", share_claim(f"s{i}-gpu", "40Gi"))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    report = ctl.run_cycle()
    assert report.admitted == 2, report
    placed = [released(api, f"team-a/s{i}") for i in range(3)]
    assert sorted(placed, key=str) == [("dra-0", "0"), ("dra-0", "0"), (None, None)], placed


def test_a_share_by_capacity_never_goes_to_an_exclusive_gpu() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", slice_of("dra-0", 8))  # whole GPUs only
    api.add_pod(share_pod("s0", 40 * 1024, 500))
    api.add_dra("resourceclaims", share_claim("s0-gpu", "40Gi"))
    api.add_pod(dra_pod("whole", 1))
    api.add_dra("resourceclaims", claim("whole-gpu", 1))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    ctl.run_cycle()
    assert released(api, "team-a/s0") == (None, None)
    assert released(api, "team-a/whole")[0] == "dra-0"


def test_a_whole_gpu_claim_may_take_a_shared_gpu_and_holds_all_of_it() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", shared_slice("dra-0", 1))
    # a running whole-GPU claim on the shared device: its policy's default consumed little,
    # but the claim asked for the device, so it holds all of it
    held = claim("whole-gpu", 1, node_name="dra-0", devices=["gpu-0"], pods=["whole"])
    held["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": "1Gi"}
    api.add_dra("resourceclaims", held)
    api.add_pod(dra_pod("whole", 1, gated=False, node_name="dra-0"))
    api.add_pod(share_pod("s0", 10 * 1024, 125))
    api.add_dra("resourceclaims", share_claim("s0-gpu", "10Gi"))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 0
    assert released(api, "team-a/s0") == (None, None)


def test_an_allocated_share_holds_the_memory_it_consumed() -> None:
    # 48Gi consumed (the device's policy rounded a 40Gi request up): 32Gi are left
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", shared_slice("dra-0", 1))
    api.add_dra("resourceclaims", share_claim("r0-gpu", "40Gi", node_name="dra-0",
                                              consumed="48Gi"))
    api.add_pod(share_pod("r0", 40 * 1024, 500, gated=False, node_name="dra-0"))
    api.add_pod(share_pod("big", 40 * 1024, 500))
    api.add_dra("resourceclaims", share_claim("big-gpu", "40Gi"))
    api.add_pod(share_pod("small", 30 * 1024, 375))
    api.add_dra("resourceclaims", share_claim("small-gpu", "30Gi"))
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (running,) = [r for r in built.snapshot.running if r.name == "team-a/r0"]
    assert [(s.index, s.milli) for s in running.gpus] == [(0, 600)]
    clock.advance(10)
    ctl.run_cycle()
    assert released(api, "team-a/big") == (None, None)
    assert released(api, "team-a/small") == ("dra-0", "0")


def test_the_devices_request_policy_rounds_the_planned_memory_up() -> None:
    # steps of 32Gi: a 40Gi share consumes 64Gi, so two do not fit on one 80Gi GPU
    step = {"default": "32Gi", "validRange": {"min": "32Gi", "step": "32Gi"}}
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", shared_slice("dra-0", 1, policy=step))
    for i in range(2):
        api.add_pod(share_pod(f"s{i}", 40 * 1024, 500))
        api.add_dra("resourceclaims", share_claim(f"s{i}-gpu", "40Gi"))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    assert ctl.run_cycle().admitted == 1


def test_a_share_whose_memory_annotation_differs_from_its_claim_is_never_released() -> None:
    api = FakeApi()
    api.add_node(slice_only_node("dra-0"))
    api.add_dra("resourceslices", shared_slice("dra-0", 1))
    api.add_pod(share_pod("s0", 10 * 1024, 125))  # says 10Gi
    api.add_dra("resourceclaims", share_claim("s0-gpu", "70Gi"))  # the claim asks for 70Gi
    clock = FakeClock()
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (info,) = built.gangs.values()
    assert info.state == GangState.BROKEN
    assert "a share of one GPU holding 71680 MiB" in (info.error or "")
    clock.advance(10)
    assert ctl.run_cycle().admitted == 0
