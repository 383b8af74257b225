"""The leader's records survive a leader change (admission/controller/records.py): saved to a
ConfigMap in Berth's namespace, read back by the next leader before its first batch cycle, and
a form that is not one, an API server that cannot be read or a stale write never costs a cycle
or overwrites a saved history with one that never saw it."""

from __future__ import annotations

import json

import pytest

from admission.controller.api import ApiError, Json
from admission.controller.controller import Controller
from admission.controller.records import CONFIG_MAP, KEY
from solver.types import FairSharing, SolverPolicy
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gates, settings, solver_fn
from tests.admission.controller.objects import T0, FakeClock, node, pod

NS = "berth-system"
ON = SolverPolicy(fair_sharing=FairSharing(half_life_s=3600.0, boost=2.0))


class FlakyApi(FakeApi):
    """The in-memory API server, with ConfigMap reads or writes that fail on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_reads = False
        self.fail_writes = False

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        if self.fail_reads:
            raise ApiError(503, "the server is currently unable to handle the request")
        return super().get_config_map(namespace, name)

    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json:
        if self.fail_writes:
            raise ApiError(500, "etcdserver: request timed out")
        return super().replace_config_map(namespace, name, body)


def replica(api: FakeApi, clock: FakeClock, identity: str) -> Controller:
    ctl = controller(api, clock, s=settings(solver_policy=ON, records_save_seconds=60.0),
                     solve_fn=solver_fn("bestfit"), identity=identity)
    ctl.records.monotonic = lambda: clock().timestamp()
    return ctl


def hour_of_history(api: FakeApi, clock: FakeClock) -> Controller:
    """team-a holds both GPUs of n0 for an hour while team-b's pod waits, under replica-0,
    which saves its records along the way; then team-a's pod ends, an unmanaged pod takes one
    GPU, and one pod of each tenant, created at the same moment, want the other."""
    api.add_node(node("n0", gpus=2))
    api.add_pod(pod("hog", gpus=2, gated=False, node_name="n0"))
    api.add_pod(pod("early", ns="team-b", gpus=2))
    first = replica(api, clock, "replica-0")
    for _ in range(6):
        clock.advance(600)
        first.run_batch()
    del api.pods["team-a/hog"], api.pods["team-b/early"]
    api.add_pod(pod("other", ns="unmanaged", gpus=1, gated=False, node_name="n0"))
    api.add_pod(pod("a1", gpus=1, created=clock()))
    api.add_pod(pod("b1", ns="team-b", gpus=1, created=clock()))
    return first


def saved(api: FakeApi) -> Json:
    return json.loads(api.config_maps[f"{NS}/{CONFIG_MAP}"]["data"][KEY])


def test_the_leader_saves_its_records_when_due() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    first = hour_of_history(api, clock)
    form = saved(api)
    assert form["version"] == 1
    # the last save came from the last cycle: an hour of team-a holding 2000 milli
    usage = first.cycle.records.usage
    assert usage is not None
    assert form["usage"]["sums"]["team-a"][0] == pytest.approx(usage._sums["team-a"][0])
    assert first.metrics.records.labels("saved")._value.get() == 5  # every 600 s but the first
    cm = api.config_maps[f"{NS}/{CONFIG_MAP}"]
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/part-of": "berth"}


def test_a_new_leader_carries_on_and_the_owed_tenant_gets_the_gpu() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    first = hour_of_history(api, clock)
    held_b = first.cycle.records.usage.past("team-b")  # type: ignore[union-attr]
    second = replica(api, clock, "replica-1")
    clock.advance(10)
    second.run_batch()
    assert second.metrics.records.labels("restored")._value.get() == 1
    assert second.cycle.records.usage is not None
    assert second.cycle.records.usage.past("team-b")[1] >= held_b[1] * 0.99
    # team-b was owed for an hour: it gets the free GPU, though team-a's pod is first in the
    # queue's own order (test_fair_sharing.py: without the record team-a's pod gets it)
    assert gates(api, "team-b/b1") == []
    assert gates(api, "team-a/a1") == ["berth.dev/admission"]


def test_without_the_saved_records_the_new_leader_starts_over() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    hour_of_history(api, clock)
    del api.config_maps[f"{NS}/{CONFIG_MAP}"]
    second = replica(api, clock, "replica-1")
    clock.advance(10)
    second.run_batch()
    assert second.metrics.records.labels("absent")._value.get() == 1
    assert gates(api, "team-a/a1") == []  # the queue's own order: the history is lost
    assert gates(api, "team-b/b1") == ["berth.dev/admission"]


@pytest.mark.parametrize("data", [
    {KEY: "{not json"},
    {KEY: json.dumps({"version": 1, "usage": {"halfLifeSeconds": 3600, "mass": 0.5,
                                               "lastSeconds": 0, "sums": {"team-a": [1e40, 0]},
                                               "last": {}}, "workload": None})},
    {KEY: json.dumps({"version": 99, "usage": None, "workload": None})},
    {"other.json": "{}"},
    {},
])
def test_a_saved_form_that_is_not_one_is_refused_then_replaced(data: dict[str, str]) -> None:
    api, clock = FakeApi(), FakeClock(T0)
    api.add_node(node("n0", gpus=2))
    api.create_config_map(NS, {"metadata": {"name": CONFIG_MAP, "namespace": NS},
                               "data": data})
    ctl = replica(api, clock, "replica-0")
    api.add_pod(pod("a1", gpus=1, created=clock()))
    ctl.relist()
    clock.advance(10)
    ctl.run_batch()  # the cycle runs all the same
    assert gates(api, "team-a/a1") == []
    assert ctl.metrics.records.labels("refused")._value.get() == 1
    clock.advance(60)
    ctl.run_batch()
    form = saved(api)
    assert form["version"] == 1 and form["usage"]["halfLifeSeconds"] == 3600.0


def test_an_unreadable_api_server_costs_no_cycle_and_overwrites_nothing() -> None:
    api, clock = FlakyApi(), FakeClock(T0)
    hour_of_history(api, clock)
    before = saved(api)
    api.fail_reads = True
    second = replica(api, clock, "replica-1")
    for _ in range(3):
        clock.advance(60)
        second.run_batch()  # cycles go on (the owed tenant's edge is lost meanwhile)
    assert second.metrics.records.labels("read_failed")._value.get() == 3
    assert saved(api) == before  # nothing saved over the history it never read
    api.fail_reads = False
    clock.advance(60)
    second.run_batch()
    assert second.metrics.records.labels("restored")._value.get() == 1
    clock.advance(60)
    second.run_batch()
    assert saved(api)["usage"]["mass"] > before["usage"]["mass"]  # carried on, not restarted


def test_a_failed_write_is_retried_at_the_next_save() -> None:
    api, clock = FlakyApi(), FakeClock(T0)
    first = hour_of_history(api, clock)
    api.fail_writes = True
    clock.advance(60)
    first.run_batch()
    assert first.metrics.records.labels("save_failed")._value.get() == 1
    api.fail_writes = False
    clock.advance(60)
    first.run_batch()
    assert first.metrics.records.labels("saved")._value.get() == 6


def test_a_stale_write_is_refused_and_the_record_read_again() -> None:
    """Another replica saved since this one read: its update carries the old
    resourceVersion, is refused, and the records are read again before any save."""
    api, clock = FakeApi(), FakeClock(T0)
    first = hour_of_history(api, clock)
    other = replica(api, clock, "replica-1")
    clock.advance(60)
    other.run_batch()  # reads
    clock.advance(60)
    other.run_batch()  # saves: first's resourceVersion is stale now
    written = api.config_maps[f"{NS}/{CONFIG_MAP}"]["metadata"]["resourceVersion"]
    clock.advance(60)
    first.run_batch()
    assert first.metrics.records.labels("save_failed")._value.get() == 1
    assert api.config_maps[f"{NS}/{CONFIG_MAP}"]["metadata"]["resourceVersion"] == written
    assert not first.records.loaded
    clock.advance(60)
    first.run_batch()  # reads again, restored
    assert first.metrics.records.labels("restored")._value.get() == 1


def test_a_replica_that_may_not_write_saves_nothing() -> None:
    api, clock = FakeApi(), FakeClock(T0)
    api.add_node(node("n0", gpus=2))
    ctl = replica(api, clock, "replica-0")
    ctl.leader_required = True  # started, and not holding the Lease
    assert not ctl.elector.is_leader
    for _ in range(3):
        clock.advance(60)
        ctl.run_batch()
    assert f"{NS}/{CONFIG_MAP}" not in api.config_maps
