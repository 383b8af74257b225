"""What each release backend writes: Kueue's queue and pod-group keys next to Kueue's own
gate, Volcano's PodGroup with minMember and the tenant's queue."""

from __future__ import annotations

import pytest

from admission import constants as c
from admission.backends import BACKENDS, BackendName, backend_named
from admission.policy import Queues
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import FakeClock, node, pod


def cluster() -> FakeApi:
    api = FakeApi()
    api.add_node(node("n0"))
    return api


def _kueue_gang(api: FakeApi, name: str, *, gpus: int = 2, gates: tuple[str, ...] = (
        c.KUEUE_GATE,)) -> None:
    for i in range(2):
        p = pod(f"{name}{i}", gang=name, size=2, gpus=gpus, extra_gates=gates)
        p["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] = "team-a-queue"
        api.add_pod(p)


def _kueue_admits(api: FakeApi, name: str, selector: dict[str, str] | None = None) -> None:
    """What Kueue's admission does to the pods: its gates go, its flavor's node labels
    come."""
    for i in range(2):
        spec = api.pods[f"team-a/{name}{i}"]["spec"]
        spec["schedulingGates"] = [g for g in spec["schedulingGates"]
                                   if not g["name"].startswith("kueue.x-k8s.io/")]
        if selector:
            spec.setdefault("nodeSelector", {}).update(selector)


def test_kueue_admits_first_then_berth_places_and_writes_its_queue_keys() -> None:
    """A gang Kueue has not admitted is never placed: no GPUs held for it, its pods told
    they wait for Kueue. Once Kueue lifts its gates, Berth places and releases it."""
    api = cluster()
    _kueue_gang(api, "kg", gates=(c.KUEUE_GATE, "kueue.x-k8s.io/topology"))
    s = settings(backend="kueue", queues={"team-a": "team-a-queue"})
    ctl = controller(api, FakeClock(), s=s)
    report = ctl.run_cycle()
    assert report.admitted == 0
    for i in range(2):
        key = f"team-a/kg{i}"
        assert gates(api, key) == [c.SCHEDULING_GATE, c.KUEUE_GATE, "kueue.x-k8s.io/topology"]
        assert c.ANNOTATION_ASSIGNED_NODE not in api.pods[key]["metadata"]["annotations"]
        cond = condition(api, key)
        assert cond is not None and cond["reason"] == "QueueAdmission", cond
        assert "Kueue has not admitted it yet" in cond["message"]
        assert "kueue.x-k8s.io/admission, kueue.x-k8s.io/topology" in cond["message"]
    _kueue_admits(api, "kg")
    ctl.relist()
    ctl.run_cycle()
    for i in range(2):
        key = f"team-a/kg{i}"
        assert gates(api, key) == []
        m = api.pods[key]["metadata"]
        assert m["annotations"][c.ANNOTATION_ASSIGNED_NODE] == "n0"
        assert m["labels"][c.KUEUE_POD_GROUP_LABEL] == "kg"
        assert m["annotations"][c.KUEUE_POD_GROUP_COUNT] == "2"
        assert m["labels"][c.KUEUE_QUEUE_LABEL] == "team-a-queue"


def test_a_gang_kueue_holds_leaves_its_gpus_to_an_admitted_one() -> None:
    """n0 has 8 GPUs. The first gang (2 x 4) waits for Kueue; the second, admitted, gets the
    GPUs: what Kueue holds back holds nothing back in Berth."""
    api = cluster()
    _kueue_gang(api, "held", gpus=4)
    _kueue_gang(api, "ok", gpus=4)
    _kueue_admits(api, "ok")
    s = settings(backend="kueue", queues={"team-a": "team-a-queue"})
    controller(api, FakeClock(), s=s).run_cycle()
    assert all(gates(api, f"team-a/ok{i}") == [] for i in range(2))
    assert all(c.SCHEDULING_GATE in gates(api, f"team-a/held{i}") for i in range(2))


def test_berth_places_within_the_flavor_kueue_chose() -> None:
    """Kueue admitted the gang into a flavor whose node label only n1 carries: Berth
    places it there, though packing alone would fill n0's last two GPUs."""
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    n1 = node("n1", gpus=8)
    n1["metadata"]["labels"]["flavor"] = "h100"
    api.add_node(n1)
    api.add_pod(pod("other", gpus=6, gated=False, node_name="n0"))
    _kueue_gang(api, "fl", gpus=1)
    _kueue_admits(api, "fl", {"flavor": "h100"})
    s = settings(backend="kueue", queues={"team-a": "team-a-queue"})
    controller(api, FakeClock(), s=s).run_cycle()
    for i in range(2):
        assert gates(api, f"team-a/fl{i}") == []
        assert api.pods[f"team-a/fl{i}"]["metadata"]["annotations"][
            c.ANNOTATION_ASSIGNED_NODE] == "n1"


def test_other_backends_wait_for_no_queue() -> None:
    p = pod("x", extra_gates=(c.KUEUE_GATE,))
    assert backend_named("standalone").waiting_for(p) is None
    assert backend_named("volcano").waiting_for(p) is None
    assert backend_named("kueue").waiting_for(pod("y")) is None
    assert "kueue.x-k8s.io/admission" in (backend_named("kueue").waiting_for(p) or "")


def test_volcano_pod_group_is_created_before_the_gates_open() -> None:
    api = cluster()
    for i in range(3):
        p = pod(f"v{i}", gang="vg", size=3, gpus=2)
        p["spec"]["schedulerName"] = "volcano"
        api.add_pod(p)
    s = settings(backend="volcano", queues={"team-a": "research"})
    controller(api, FakeClock(), s=s).run_cycle()
    group = api.custom[("podgroups", "team-a", "vg")]
    assert group["spec"] == {"minMember": 3, "queue": "research"}
    for i in range(3):
        ann = api.pods[f"team-a/v{i}"]["metadata"]["annotations"]
        assert ann[c.VOLCANO_GROUP_ANNOTATION] == "vg"
        assert ann[c.VOLCANO_QUEUE_ANNOTATION] == "research"
        assert gates(api, f"team-a/v{i}") == []


def test_backend_problems_name_what_only_creation_could_set() -> None:
    assert "schedulerName" in (backend_named("volcano").problem(pod("x")) or "")
    assert c.KUEUE_QUEUE_LABEL in (backend_named("kueue").problem(pod("x")) or "")
    assert backend_named("standalone").problem(pod("x")) is None


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"release\.backend: unknown backend 'slurm'"):
        backend_named("slurm")


def test_every_backend_name_has_one_backend_and_its_queue_field() -> None:
    assert list(BACKENDS) == list(BackendName)
    assert all(BACKENDS[name].name is name for name in BackendName)
    # A backend with queues reads tenants[].queues.<its name>: the policy declares that field.
    with_queues = {b.name.value for b in BACKENDS.values() if b.queue_kind}
    assert with_queues == set(Queues.model_fields) == {"kueue", "volcano"}


def test_unknown_backend_lists_every_name() -> None:
    with pytest.raises(ValueError, match=r"; use standalone, kueue or volcano$"):
        backend_named("slurm")
