"""The records' saved form (solver/records.py): what a new leader reads back is what the last
one had, and a form that is not one is refused with the field named, never a crash and never a
value past its bound (generated and hostile input, not only hand-picked cases)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.records import MAX_STATE_BYTES, STATE_VERSION, Records
from solver.types import (
    GPU,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
)

NODES = (Node(name="n0", cpu_milli=64_000, memory_mib=512_000,
              gpus=tuple(GPU(index=i, model="A100", memory_mib=81_920) for i in range(8))),)
TENANTS = (Tenant("a"), Tenant("b", weight=2.0))


def gang(name: str, tenant: str, gpus: int = 1, milli: int = 1000) -> Gang:
    return Gang(name=name, tenant=tenant, pods=(
        PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1000, gpu_count=gpus,
                   gpu_milli=milli, models=frozenset({"A100"})),))


def snap(*gangs: Gang, held_by_a: int = 4) -> Snapshot:
    running = tuple(Running(name=f"r{i}", node="n0", tenant="a",
                            gpus=(GpuShare(index=i, milli=1000),)) for i in range(held_by_a))
    return Snapshot(nodes=NODES, gangs=gangs, running=running, tenants=TENANTS,
                    policy=SolverPolicy())


def history() -> Records:
    r = Records()
    r.apply(snap(gang("g1", "b", gpus=2)), 0.0)
    r.apply(snap(gang("g1", "b", gpus=2), gang("g2", "a", milli=500)), 600.0)
    r.apply(snap(gang("g3", "b", gpus=4), held_by_a=6), 1800.0)
    return r


def typical(s: Snapshot) -> dict[tuple[int, int, int], float]:
    return {(t.cpu_milli, t.gpu_count, t.gpu_milli): t.weight for t in s.policy.typical_pods}


def test_a_read_back_record_carries_on_exactly() -> None:
    before = history()
    after = Records.loads(before.dumps())
    nxt = snap(gang("g3", "b", gpus=4), gang("g4", "a", gpus=1), held_by_a=2)
    a, b = before.apply(nxt, 2400.0), after.apply(nxt, 2400.0)
    assert [(t.name, t.past_held_milli, t.past_fair_milli) for t in a.tenants] == \
        [(t.name, t.past_held_milli, t.past_fair_milli) for t in b.tenants]
    assert a.tenants[1].past_fair_milli > 0  # the record says something
    assert typical(a) == pytest.approx(typical(b), rel=1e-12)
    assert len(typical(a)) == 4  # two shapes of each tenant


def test_a_read_back_workload_does_not_count_the_pending_gangs_again() -> None:
    before = history()
    after = Records.loads(before.dumps())
    again = snap(gang("g3", "b", gpus=4), held_by_a=6)  # g3 was counted by the writer
    assert typical(before.apply(again, 1800.0)) == \
        pytest.approx(typical(after.apply(again, 1800.0)), rel=1e-12)


def test_without_digests_the_first_observation_counts_nothing() -> None:
    form = json.loads(history().dumps())
    form["workload"]["seen"] = None  # a writer that counted too many gangs to name them
    after = Records.loads(json.dumps(form))
    counted = typical(history().apply(snap(), 1800.0))
    assert typical(after.apply(snap(gang("new", "a", gpus=8)), 1800.0)) == \
        pytest.approx(counted, rel=1e-12)


def test_records_the_policy_turns_off_are_saved_as_absent() -> None:
    r = Records()
    off = SolverPolicy(fair_sharing=SolverPolicy().fair_sharing.__class__(half_life_s=0.0))
    r.apply(Snapshot(nodes=NODES, gangs=(gang("g", "a"),), tenants=TENANTS, policy=off), 0.0)
    data = json.loads(r.dumps())
    assert data["usage"] is None and data["workload"] is not None
    assert Records.loads(r.dumps()).usage is None


def test_the_saved_form_stays_under_its_size_limit() -> None:
    r = Records()
    tenants = tuple(Tenant(f"tenant-{i:04d}") for i in range(300))
    gangs = tuple(Gang(name=f"g{t}-{k}", tenant=f"tenant-{t:04d}", pods=(
        PodRequest(name=f"g{t}-{k}-0", cpu_milli=1000 + k, memory_mib=1, gpu_count=1,
                   gpu_milli=1000, models=frozenset({"A100", "H100"})),))
        for t in range(300) for k in range(256))
    r.apply(Snapshot(nodes=NODES, gangs=gangs, tenants=tenants), 0.0)
    text = r.dumps()
    assert len(text) <= MAX_STATE_BYTES
    back = Records.loads(text)
    assert back.workload is not None and back.workload.typical({})


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d.update(version=2), "records.version"),
    (lambda d: d.pop("usage"), "records: expected the fields"),
    (lambda d: d.update(extra=1), "unknown extra"),
    (lambda d: d["usage"].update(mass=2.0), "records.usage.mass"),
    (lambda d: d["usage"].update(halfLifeSeconds=0), "records.usage.halfLifeSeconds"),
    (lambda d: d["usage"]["sums"].update(a=[1e30, 0.0]), "records.usage.sums.a[0]"),
    (lambda d: d["usage"]["sums"].update(a=[-1.0, 0.0]), "records.usage.sums.a[0]"),
    (lambda d: d["usage"]["sums"].update(a=[True, 0.0]), "records.usage.sums.a[0]"),
    (lambda d: d["usage"]["last"].update(a=[1.0]), "records.usage.last.a"),
    (lambda d: d["usage"]["last"].update({"": [1.0, 1.0]}), "tenant name"),
    (lambda d: d["workload"]["counts"].update(a=[[1, 1, 5000, [], 1.0]]),
     "records.workload.counts.a[0]: milli per GPU"),
    (lambda d: d["workload"]["counts"].update(a=[[1, 1, 500, "A100", 1.0]]),
     "records.workload.counts.a[0]: models"),
    (lambda d: d["workload"]["counts"].update(a=[[1, 1, 500, [], -3]]),
     "records.workload.counts.a[0]"),
    (lambda d: d["workload"]["counts"].update(a=[[1, 1, 500, [], 1.0]] * 300),
     "at most 256 shapes"),
    (lambda d: d["workload"].update(lastSeconds="soon"), "records.workload.lastSeconds"),
    (lambda d: d["workload"].update(seen=["abc"]), "records.workload.seen"),
    (lambda d: d["workload"].update(seen="everything"), "records.workload.seen"),
])
def test_a_form_that_is_not_one_is_refused_naming_the_field(edit: Any, field: str) -> None:
    data = json.loads(history().dumps())
    edit(data)
    with pytest.raises(ValueError, match=None) as err:
        Records.loads(json.dumps(data))
    assert field in str(err.value), str(err.value)


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '"x"', "NaN", '{"version": NaN}',
                                  "[" * 100_000, "1" * (MAX_STATE_BYTES + 1)])
def test_text_that_is_not_a_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="records"):
        Records.loads(text)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=5),
    max_leaves=30)


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))] or [path]
    return [path]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_mutation_of_a_form_is_read_or_refused_never_a_crash(data: st.DataObject) -> None:
    """Each leaf of a real saved form replaced by an arbitrary JSON value: either refused with
    a ValueError, or read into records whose every average stays within the bounds."""
    form = json.loads(history().dumps())
    paths = _leaves(form)
    path = data.draw(st.sampled_from(paths))
    value = data.draw(JSON)
    if not path:
        form = value
    else:
        target = form
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
    try:
        rec = Records.loads(json.dumps(form))
    except ValueError as exc:
        assert str(exc).startswith("records"), exc
        return
    nxt = snap(gang("x", "a"), gang("y", "b", gpus=2))
    out = rec.apply(nxt, 3600.0)
    for t in out.tenants:
        assert 0.0 <= t.past_held_milli <= 10**12 and 0.0 <= t.past_fair_milli <= 10**12


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_any_json_is_read_or_refused_never_a_crash(value: Any) -> None:
    try:
        Records.loads(json.dumps(value))
    except ValueError as exc:
        assert str(exc).startswith("records"), exc


def test_the_version_is_written() -> None:
    assert json.loads(Records().dumps()) == {"version": STATE_VERSION, "usage": None,
                                             "workload": None}


def test_a_saved_shape_with_gpus_but_no_share_is_refused_and_a_zero_count_weighs_nothing(
) -> None:
    """Found by the mutation test above: a shape of 0 GPUs with a share (or GPUs with none)
    was read and then crashed the next batch cycle's target workload."""
    form = json.loads(history().dumps())
    row = form["workload"]["counts"]["b"][1]
    row[1] = 0  # GPUs 0, milli per GPU still 1000
    with pytest.raises(ValueError, match=r"^records.*GPUs and milli per GPU must both be 0"):
        Records.loads(json.dumps(form))
    form = json.loads(history().dumps())
    form["workload"]["counts"]["b"][1][4] = 0  # counted 0 times
    rec = Records.loads(json.dumps(form))
    out = rec.apply(snap(gang("x", "a"), gang("y", "b", gpus=2)), 3600.0)
    assert out.policy.typical_pods and all(t.weight > 0 for t in out.policy.typical_pods)
