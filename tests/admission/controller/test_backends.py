"""What each release backend writes: Kueue's queue and pod-group keys next to Kueue's own
gate, Volcano's PodGroup with minMember and the tenant's queue."""

from __future__ import annotations

import pytest

from admission import constants as c
from admission.backends import BACKENDS, BackendName, backend_named
from admission.policy import Queues
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gates, settings
from tests.admission.controller.objects import FakeClock, node, pod


def cluster() -> FakeApi:
    api = FakeApi()
    api.add_node(node("n0"))
    return api


def test_kueue_gate_stays_and_queue_keys_are_written() -> None:
    api = cluster()
    for i in range(2):
        p = pod(f"k{i}", gang="kg", size=2, gpus=2, extra_gates=(c.KUEUE_GATE,))
        p["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] = "team-a-queue"
        api.add_pod(p)
    s = settings(backend="kueue", queues={"team-a": "team-a-queue"})
    controller(api, FakeClock(), s=s).run_cycle()
    for i in range(2):
        key = f"team-a/k{i}"
        assert gates(api, key) == [c.KUEUE_GATE]  # Kueue removes its own
        m = api.pods[key]["metadata"]
        assert m["labels"][c.KUEUE_POD_GROUP_LABEL] == "kg"
        assert m["annotations"][c.KUEUE_POD_GROUP_COUNT] == "2"
        assert m["labels"][c.KUEUE_QUEUE_LABEL] == "team-a-queue"


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
