"""Trust follows the API server, not the pod (DESIGN.md, contract 7): the controller takes a
pod's tenant from its namespace, its demand from what its resources bear out, its placement
from what Berth wrote in a managed namespace, and bounds what users may set by the policy.

Each test is a hole the controller had: a pod that claimed a tenant, a placement, a demand, a
gang size, a priority or a QoS class and was believed.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from admission import constants as c
from admission.controller.settings import Settings, from_policy
from admission.controller.snapshot import build
from admission.policy import Policy
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates
from tests.admission.controller.objects import FakeClock, node, pod

POLICY: dict[str, Any] = {
    "tenants": [
        {"name": "team-a", "namespaces": ["team-a"], "quota": {"gpus": 16},
         "borrowing": {"enabled": False}},
        {"name": "team-b", "namespaces": ["team-b"], "quota": {"gpus": 8},
         "borrowing": {"enabled": False}, "limits": {"maxGangSize": 16},
         "allowedQosClasses": ["training"], "defaultQosClass": "training"},
    ],
    "qosClasses": [
        {"name": "training", "sm": 0.9, "membw": 0.7},
        {"name": "inference", "sm": 0.3, "membw": 0.4, "latencySensitive": True,
         "soloLatencyMs": 20, "sloMs": 50},
    ],
    "sharing": {"backend": "time-slicing"},
    "batch": {"fastPathClasses": ["inference"]},
    "solver": {"timeLimitSeconds": 2},
}


def policy_settings(**edit: Any) -> Settings:
    doc = copy.deepcopy(POLICY)
    doc.update(edit)
    return dataclasses.replace(from_policy(Policy.model_validate(doc)), release_writers=1)


def cluster(nodes: int = 1) -> FakeApi:
    api = FakeApi()
    for i in range(nodes):
        api.add_node(node(f"n{i}", gpus=8, rack=f"rack-{i // 2}"))
    return api


def released(api: FakeApi, key: str) -> bool:
    return c.SCHEDULING_GATE not in gates(api, key)


def forged_placement(name: str, ns: str, node_name: str, gpus: int = 8) -> dict[str, Any]:
    """A Pending pod with no GPU resources and no gate that claims team-b and Berth's
    assignment of ``gpus`` GPUs of ``node_name``."""
    p = pod(name, ns=ns, tenant="team-b", gpus=gpus, gated=False)
    for section in ("limits", "requests"):
        p["spec"]["containers"][0]["resources"][section].pop("nvidia.com/gpu")
    p["metadata"]["annotations"].update({
        c.ANNOTATION_TENANT: "team-b",
        c.ANNOTATION_ASSIGNED_NODE: node_name,
        c.ANNOTATION_ASSIGNED_GPUS: ",".join(str(i) for i in range(gpus)),
        c.ANNOTATION_ASSIGNED_GPU_MILLI: ",".join("1000" for _ in range(gpus)),
        c.ANNOTATION_PLAN: "forged",
    })
    return p


# --------------------------------------------------------------------------------------------
# 1. The tenant is the namespace's
# --------------------------------------------------------------------------------------------


def test_a_pod_is_its_namespaces_tenant_whatever_its_label_says() -> None:
    api = cluster()
    # team-b is at its 8-GPU quota; a team-a pod that says it is team-b's is team-a's.
    api.add_pod(pod("b-run", ns="team-b", gpus=8, gated=False, node_name="n0"))
    claim = pod("claims-b", ns="team-a", tenant="team-b", gpus=0)
    claim["metadata"]["annotations"][c.ANNOTATION_TENANT] = "team-b"
    api.add_pod(claim)
    s = policy_settings()
    built = build(controller(api, FakeClock(), s=s).inventory.view(), s, FakeClock()())
    assert built.gangs["team-a/claims-b"].tenant == "team-a"
    assert built.gangs["team-a/claims-b"].gang.tenant == "team-a"


def test_a_bound_pod_of_an_unmanaged_namespace_is_charged_to_no_tenant() -> None:
    api = cluster(nodes=2)
    # 8 GPUs of n0 run a pod of namespace "ops", which the policy does not manage, labelled
    # team-b: it holds those GPUs but is not team-b's, so team-b's 8-GPU pod fits its quota.
    api.add_pod(pod("ops-job", ns="ops", tenant="team-b", gpus=8, gated=False,
                    node_name="n0"))
    api.add_pod(pod("b-real", ns="team-b", gpus=8))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert released(api, "team-b/b-real")
    ann = api.pods["team-b/b-real"]["metadata"]["annotations"]
    assert ann[c.ANNOTATION_ASSIGNED_NODE] == "n1"


# --------------------------------------------------------------------------------------------
# 2. Holding comes from binding, or from Berth's plan in a managed namespace
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ns", ["mallory", "team-b"])
def test_a_forged_placement_holds_no_gpu(ns: str) -> None:
    api = cluster()
    api.add_pod(forged_placement("squatter", ns, "n0"))
    api.add_pod(pod("b-real", ns="team-b", gpus=8))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert released(api, "team-b/b-real"), condition(api, "team-b/b-real")
    ann = api.pods["team-b/b-real"]["metadata"]["annotations"]
    assert ann[c.ANNOTATION_ASSIGNED_NODE] == "n0"
    assert ann[c.ANNOTATION_ASSIGNED_GPUS] == "0,1,2,3,4,5,6,7"


def test_a_real_release_not_yet_bound_still_holds_its_gpus() -> None:
    api = cluster()
    api.add_pod(pod("first", ns="team-a", gpus=8))
    clock = FakeClock()
    ctl = controller(api, clock, s=policy_settings())
    ctl.run_cycle()
    assert released(api, "team-a/first")
    assert not api.pods["team-a/first"]["spec"].get("nodeName")  # nobody bound it yet
    api.add_pod(pod("second", ns="team-a", gpus=1))
    ctl.relist()
    clock.advance(10)
    ctl.run_cycle()
    assert not released(api, "team-a/second")


def test_bound_pods_hold_their_sidecars_and_init_containers_gpus() -> None:
    api = cluster()
    other = pod("with-sidecar", ns="ops", gpus=2, gated=False, node_name="n0")
    other["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always",
         "resources": {"limits": {"nvidia.com/gpu": "2"}}},
        {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
    ]
    # Kubernetes counts app containers plus sidecars (2 + 2) or, if larger, the init peak:
    # warmup runs beside the sidecar (3 + 2). The pod holds 5 GPUs, not its app's 2.
    api.add_pod(other)
    api.add_pod(pod("wants-4", ns="team-a", gpus=4))
    api.add_pod(pod("wants-3", ns="team-a", gpus=3))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert not released(api, "team-a/wants-4")
    assert released(api, "team-a/wants-3")
    used = api.pods["team-a/wants-3"]["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_GPUS]
    assert used == "5,6,7"


# --------------------------------------------------------------------------------------------
# 3. Demand is what the resources bear out
# --------------------------------------------------------------------------------------------


def _no_gpu_resources(p: dict[str, Any]) -> dict[str, Any]:
    for section in ("limits", "requests"):
        p["spec"]["containers"][0]["resources"][section].pop("nvidia.com/gpu", None)
    return p


def test_demand_annotations_the_resources_do_not_bear_out_are_never_released() -> None:
    api = cluster()
    api.add_pod(_no_gpu_resources(pod("forged", ns="team-b", gpus=4)))
    api.add_pod(pod("b-real", ns="team-b", gpus=8))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert not released(api, "team-b/forged")
    cond = condition(api, "team-b/forged")
    assert cond["reason"] == "DemandMismatch"
    assert "berth.dev/gpu-count=4" in cond["message"] and "no GPU resource" in cond["message"]
    assert any(e["reason"] == "DemandMismatch" and e["type"] == "Warning" for e in api.events)
    # Not charged to team-b: its real pod gets the whole quota.
    assert released(api, "team-b/b-real")


def test_a_gated_pod_of_an_unmanaged_namespace_is_never_berths() -> None:
    api = cluster()
    intruder = _no_gpu_resources(pod("intruder", ns="mallory", tenant="team-b", gpus=4))
    intruder["metadata"]["annotations"][c.ANNOTATION_TENANT] = "team-b"
    api.add_pod(intruder)
    api.add_pod(pod("b-real", ns="team-b", gpus=8))
    ctl = controller(api, FakeClock(), s=policy_settings())
    report = ctl.run_cycle()
    assert not released(api, "mallory/intruder")
    assert condition(api, "mallory/intruder") is None  # Berth does not write to it at all
    assert released(api, "team-b/b-real")
    assert all(r.gang != "mallory/intruder" for r in report.released)


def test_a_share_in_the_backends_resources_is_released() -> None:
    api = cluster()
    half = pod("half", ns="team-a", gpus=1)
    half["metadata"]["annotations"].update({c.ANNOTATION_GPU_MILLI: "500",
                                            c.ANNOTATION_SHARING: "time-slicing"})
    for section in ("limits", "requests"):
        res = half["spec"]["containers"][0]["resources"][section]
        res.pop("nvidia.com/gpu")
        res["nvidia.com/gpu.shared"] = "2"  # 2 of 4 slots: half a GPU
    api.add_pod(half)
    wrong = copy.deepcopy(half)
    wrong["metadata"]["name"], wrong["metadata"]["uid"] = "wrong", "uid-wrong"
    for section in ("limits", "requests"):
        wrong["spec"]["containers"][0]["resources"][section]["nvidia.com/gpu.shared"] = "1"
    api.add_pod(wrong)
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert released(api, "team-a/half")
    assert not released(api, "team-a/wrong")
    assert condition(api, "team-a/wrong")["reason"] == "DemandMismatch"


# --------------------------------------------------------------------------------------------
# 4. Gang size
# --------------------------------------------------------------------------------------------


def test_thirty_pods_declaring_a_gang_of_one_are_not_released() -> None:
    api = cluster(nodes=4)
    for i in range(30):
        api.add_pod(pod(f"w{i}", ns="team-b", gang="swarm", size=1, gpus=0))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    for i in range(30):
        key = f"team-b/w{i}"
        assert not released(api, key)
        cond = condition(api, key)
        assert cond["reason"] == "GangSizeMismatch"
        assert "has 30 pods" in cond["message"] and "gang-size: 1" in cond["message"]


def test_pods_that_disagree_on_their_gang_size_are_not_released() -> None:
    api = cluster(nodes=2)
    for i, size in enumerate((2, 3, 3)):
        api.add_pod(pod(f"d{i}", ns="team-a", gang="mixed", size=size, gpus=1))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    for i in range(3):
        assert not released(api, f"team-a/d{i}")
        cond = condition(api, f"team-a/d{i}")
        assert cond["reason"] == "GangSizeMismatch" and "disagree" in cond["message"]


def test_a_gang_over_the_tenants_max_gang_size_is_not_released() -> None:
    api = cluster(nodes=4)
    for i in range(20):
        api.add_pod(pod(f"g{i}", ns="team-b", gang="wide", size=20, gpus=0))
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    for i in range(20):
        assert not released(api, f"team-b/g{i}")
    cond = condition(api, "team-b/g0")
    assert cond["reason"] == "GangTooLarge" and "maxGangSize of 16" in cond["message"]


def test_a_gang_without_a_declared_size_is_the_pods_that_exist() -> None:
    api = cluster(nodes=2)
    for i in range(3):
        p = pod(f"u{i}", ns="team-a", gang="owned", size=3, gpus=1)
        del p["metadata"]["annotations"][c.ANNOTATION_GANG_SIZE]
        api.add_pod(p)
    controller(api, FakeClock(), s=policy_settings()).run_cycle()
    assert all(released(api, f"team-a/u{i}") for i in range(3))


# --------------------------------------------------------------------------------------------
# 5. Priority
# --------------------------------------------------------------------------------------------


def test_a_huge_priority_is_bounded_and_the_model_stays_valid() -> None:
    api = cluster(nodes=2)
    greedy = pod("greedy", ns="team-a", gpus=2)
    greedy["metadata"]["annotations"][c.ANNOTATION_PRIORITY] = str(10**30)
    api.add_pod(greedy)
    api.add_pod(pod("b-real", ns="team-b", gpus=2))
    s = policy_settings()
    ctl = controller(api, FakeClock(), s=s)
    built = build(ctl.inventory.view(), s, FakeClock()())
    assert built.gangs["team-a/greedy"].gang.priority <= 10**9
    report = ctl.run_cycle()
    assert report.solver_status in ("OPTIMAL", "FEASIBLE"), report.solver_status
    assert released(api, "team-a/greedy") and released(api, "team-b/b-real")


def test_priority_is_held_to_the_tenants_max_priority() -> None:
    doc = copy.deepcopy(POLICY["tenants"])
    doc[0]["limits"] = {"maxPriority": 100}
    s = policy_settings(tenants=doc)
    api = cluster()
    p = pod("high", ns="team-a", gpus=1)
    p["metadata"]["annotations"][c.ANNOTATION_PRIORITY] = "5000"
    api.add_pod(p)
    built = build(controller(api, FakeClock(), s=s).inventory.view(), s, FakeClock()())
    assert built.gangs["team-a/high"].gang.priority == 100


# --------------------------------------------------------------------------------------------
# 6. QoS class
# --------------------------------------------------------------------------------------------


def test_a_qos_class_the_tenant_may_not_use_becomes_its_default() -> None:
    api = cluster()
    api.add_pod(pod("fast-b", ns="team-b", gpus=1, qos="inference"))  # team-b: training only
    api.add_pod(pod("fast-a", ns="team-a", gpus=1, qos="inference"))  # team-a: any class
    s = policy_settings()
    ctl = controller(api, FakeClock(), s=s)
    built = build(ctl.inventory.view(), s, FakeClock()())
    assert built.gangs["team-b/fast-b"].gang.pods[0].qos_class == "training"
    assert built.gangs["team-a/fast-a"].gang.pods[0].qos_class == "inference"
    assert not ctl.is_fast_path(api.pods["team-b/fast-b"])
    assert ctl.is_fast_path(api.pods["team-a/fast-a"])
