"""solver.schema: snapshots from plain data with every error and its path, and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cpsat_random import snapshots

from solver.plan import Deferred, GangPlacement, Plan, PodPlacement, SolveStats
from solver.schema import SnapshotError, parse_snapshot, plan_to_dict, snapshot_to_dict
from solver.types import GpuShare, Snapshot, TopologyMode

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "snapshot.yaml"


def _errors(data: object) -> list[str]:
    with pytest.raises(SnapshotError) as exc:
        parse_snapshot(data)
    return [str(e) for e in exc.value.errors]


def test_the_worked_example_parses() -> None:
    s = parse_snapshot(yaml.safe_load(EXAMPLE.read_text()))
    assert {t.name for t in s.tenants} == {"team-a", "team-b"}
    pretrain = next(g for g in s.gangs if g.name == "team-a/llm-pretrain")
    assert [p.name for p in pretrain.pods] == ["worker-0", "worker-1"]
    assert pretrain.topology is not None and pretrain.topology.mode is TopologyMode.REQUIRED
    assert any(p.shares_gpu for g in s.gangs for p in g.pods)
    a100 = s.nodes[0]
    assert {g.nvlink_domain for g in a100.gpus} == {"a100-0/nv0", "a100-0/nv1"}
    assert s.nodes[3].taints[0].key == "maintenance"


def test_every_error_is_reported_with_its_path() -> None:
    errors = _errors({
        "nodes": [{"name": "n", "cpu_milli": -1, "memory_mib": "lots", "lables": {}},
                  {"name": "n", "cpu_milli": 1, "memory_mib": 1,
                   "gpus": [{"model": "A100"}, {"index": 0}]}],
        "gangs": [
            {"name": "g", "tenant": "t", "pods": [{"name": "p", "gpu_count": 1,
                                                  "gpu_milli": 1500}]},
            {"name": "h", "tenant": "t", "pods": []},
            {"name": "k", "tenant": "t", "topology": {"level": "rack", "mode": "sometimes"},
             "pods": [{"name": "p", "gpu_count": 2, "gpu_milli": 500}]},
        ],
        "running": [{"name": "r", "node": "ghost"}],
        "extra": 1,
    })
    assert errors == [
        "extra: unknown field; known: nodes, running, tenants, gangs, policy",
        "nodes[0].lables: unknown field (did you mean 'labels'?)",
        "nodes[0].cpu_milli: must be >= 0, got -1",
        "nodes[0].memory_mib: must be an integer, got str 'lots'",
        "nodes[1].name: duplicate node name 'n'",
        "nodes[1].gpus[1].model: is required",
        "nodes[1].gpus: GPU indexes must be unique on a node",
        "gangs[0].pods[0].gpu_milli: must be in (0, 1000], got 1500",
        "gangs[1].pods: a gang needs at least one pod",
        "gangs[2].topology.mode: must be required or preferred, got 'sometimes'",
        "gangs[2].pods[0].gpu_milli: a pod with several GPUs takes them whole: set it to 1000",
    ]


def test_running_pods_must_name_a_known_node_and_gpu() -> None:
    errors = _errors({
        "nodes": [{"name": "n", "cpu_milli": 1, "memory_mib": 1,
                   "gpus": {"count": 2, "model": "T4"}}],
        "running": [{"name": "r", "node": "ghost"},
                    {"name": "s", "node": "n", "gpus": [{"index": 5, "milli": 100}]}],
    })
    assert errors == ["running[0].node: unknown node 'ghost'",
                      "running[1].gpus[0].index: node n has no GPU 5"]


def test_unknown_tenant_and_policy_errors() -> None:
    errors = _errors({
        "nodes": [],
        "tenants": [{"name": "a", "weight": 0}],
        "gangs": [{"name": "g", "tenant": "b", "pods": [{"name": "p"}]}],
        "policy": {"weights": {"fairness": -1}, "qos_classes": [{"name": "q", "sm": 2}]},
    })
    assert "tenants[0].weight: must be > 0, got 0" in errors
    assert any(e.startswith("gangs[0].tenant: unknown tenant 'b'") for e in errors)
    assert "policy.weights.fairness: must be in [0.0, None], got -1" in errors or any(
        e.startswith("policy.weights.fairness") for e in errors)
    assert any(e.startswith("policy.qos_classes[0].sm") for e in errors)


def test_deadlines_and_reservations_are_read_and_bounded() -> None:
    doc = {
        "nodes": [{"name": "n", "cpu_milli": 1000, "memory_mib": 1000,
                   "gpus": {"count": 2, "model": "T4"}}],
        "running": [{"name": "r", "node": "n", "gpus": [{"index": 0}], "remaining_s": 600}],
        "gangs": [{"name": "g", "tenant": "t", "runtime_s": 300,
                   "pods": [{"name": "p", "gpu_count": 2, "gpu_milli": 1000}]}],
        "policy": {"reservations": {"max_gangs": 2, "after_s": 60, "hold_ahead_s": 900}},
    }
    snap = parse_snapshot(doc)
    assert snap.running[0].remaining_s == 600 and snap.gangs[0].runtime_s == 300
    rsv = snap.policy.reservations
    assert (rsv.max_gangs, rsv.after_s, rsv.hold_ahead_s) == (2, 60, 900)
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap
    doc["running"][0]["remaining_s"] = -1
    doc["gangs"][0]["runtime_s"] = "an hour"
    doc["policy"] = {"reservations": {"max_gangs": 65, "horizon": 1, "hold_ahead_s": -5}}
    errors = _errors(doc)
    assert any(e.startswith("policy.reservations.hold_ahead_s: must be") for e in errors), errors
    assert any(e.startswith("running[0].remaining_s: must be") for e in errors), errors
    assert any(e.startswith("gangs[0].runtime_s: must be a number") for e in errors), errors
    assert any(e.startswith("policy.reservations.max_gangs: must be") for e in errors), errors
    assert any(e.startswith("policy.reservations.horizon: unknown field") for e in errors)


def test_queueing_fields_are_read_bounded_and_round_tripped() -> None:
    nodes = [{"name": "n", "cpu_milli": 1000, "memory_mib": 1000,
              "gpus": {"count": 2, "model": "T4"}}]
    q = parse_snapshot({"nodes": nodes, "policy": {"queueing": {
        "short_run_bonus": 0.5, "short_run_s": 600, "keep_order_after_s": None}}}).policy.queueing
    assert (q.short_run_bonus, q.short_run_s, q.keep_order_after_s) == (0.5, 600, None)
    snap = parse_snapshot({"nodes": nodes, "policy": {"queueing": {"short_run_s": 60}}})
    assert snap.policy.queueing.keep_order_after_s == 30.0  # left out: the default; null: off
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap
    off = parse_snapshot({"nodes": nodes, "policy": {"queueing": {"keep_order_after_s": None}}})
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(off)))) == off
    errors = _errors({"nodes": nodes, "policy": {"queueing": {
        "short_run_bonus": -1, "short_run_s": 0, "keep_order_after_s": "soon", "bonus": 1}}})
    for field in ("short_run_bonus", "short_run_s", "keep_order_after_s"):
        assert any(e.startswith(f"policy.queueing.{field}: must be") for e in errors), errors
    assert any(e.startswith("policy.queueing.bonus: unknown field") for e in errors), errors


def test_kept_reservations_are_read_bounded_and_round_tripped() -> None:
    nodes = [{"name": "n", "cpu_milli": 1000, "memory_mib": 1000,
              "gpus": {"count": 2, "model": "T4"}}]
    gangs = [{"name": "g", "tenant": "t", "reserved": True,
              "pods": [{"name": "p", "cpu_milli": 100, "memory_mib": 100, "gpu_count": 1,
                        "gpu_milli": 1000}]}]
    snap = parse_snapshot({"nodes": nodes, "gangs": gangs,
                           "policy": {"reservations": {"keep": True}}})
    assert snap.policy.reservations.keep and snap.gangs[0].reserved
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap
    plain = parse_snapshot({"nodes": nodes})
    assert not plain.policy.reservations.keep  # off unless asked for
    errors = _errors({"nodes": nodes, "gangs": [{**gangs[0], "reserved": "yes"}],
                      "policy": {"reservations": {"keep": 1}}})
    assert any(e.startswith("policy.reservations.keep: must be true or false") for e in errors)
    assert any(e.startswith("gangs[0].reserved: must be true or false") for e in errors), errors


def test_reclaim_fields_are_read_bounded_and_round_tripped() -> None:
    doc = {
        "nodes": [{"name": "n", "cpu_milli": 1000, "memory_mib": 1000,
                   "gpus": {"count": 2, "model": "T4"}}],
        "running": [{"name": "r", "node": "n", "gpus": [{"index": 0}], "tenant": "a",
                     "gang": "a/job", "priority": -3, "run_s": 900}],
        "policy": {"reclaim": {"enabled": False, "min_run_s": 60, "max_gangs": 2}},
    }
    snap = parse_snapshot(doc)
    r = snap.running[0]
    assert (r.gang, r.priority, r.run_s) == ("a/job", -3, 900)
    rc = snap.policy.reclaim
    assert (rc.enabled, rc.min_run_s, rc.max_gangs) == (False, 60, 2)
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap
    assert not parse_snapshot({"nodes": doc["nodes"]}).policy.reclaim.enabled  # off by default
    doc["running"][0].update(run_s=-1, gang=7)
    doc["policy"] = {"reclaim": {"enabled": "yes", "max_gangs": 5000, "minrun": 1}}
    errors = _errors(doc)
    assert any(e.startswith("running[0].run_s: must be") for e in errors), errors
    assert any(e.startswith("running[0].gang: must be") for e in errors), errors
    assert any(e.startswith("policy.reclaim.enabled: must be true or false") for e in errors)
    assert any(e.startswith("policy.reclaim.max_gangs: must be") for e in errors), errors
    assert any(e.startswith("policy.reclaim.minrun: unknown field") for e in errors), errors


def test_the_document_must_be_a_mapping() -> None:
    for doc in (None, [], "text", 3):
        (msg,) = _errors(doc)
        assert "the snapshot must be a mapping" in msg


@settings(max_examples=30, deadline=None)
@given(snapshots())
def test_snapshot_round_trips_through_plain_data(s: Snapshot) -> None:
    data = json.loads(json.dumps(snapshot_to_dict(s)))
    assert parse_snapshot(data) == s


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2000) | st.floats(allow_nan=True)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "nodes", "gangs", "pods", "gpus", "cpu_milli", "memory_mib",
                         "tenant", "gpu_count", "gpu_milli", "model", "runtime_s",
                         "remaining_s", "reservations", "max_gangs", "running", "gang",
                         "run_s", "priority", "reclaim", "min_run_s", "enabled", "policy",
                         "x"]), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_malformed_input_only_ever_raises_snapshot_error(data: object) -> None:
    try:
        parse_snapshot(data)
    except SnapshotError as exc:
        assert exc.errors and all(str(e) for e in exc.errors)


def test_plan_to_dict_is_json_ready() -> None:
    plan = Plan(
        (GangPlacement("g", (PodPlacement("p", "n", (GpuShare(0, 250),)),)),),
        (Deferred("h", "capacity: full"),),
        SolveStats("cpsat", "OPTIMAL", 0.1, 10.0, 10.0, False, {"x": 1.0}),
    )
    d = json.loads(json.dumps(plan_to_dict(plan)))
    assert d["admitted"][0]["pods"][0] == {"pod": "p", "node": "n",
                                           "gpus": [{"index": 0, "milli": 250}]}
    assert d["deferred"] == [{"gang": "h", "reason": "capacity: full"}]
    assert d["stats"]["status"] == "OPTIMAL"


def test_the_snapshot_format_carries_every_objective_weight() -> None:
    """The stay weight was once left out of the format: a snapshot could not set it."""
    data = {"nodes": [{"name": "n0", "cpu_milli": 1000, "memory_mib": 1000}],
            "policy": {"weights": {"stay": 0.55, "fairness": 0.7}}}
    snap = parse_snapshot(data)
    assert (snap.policy.weights.stay, snap.policy.weights.fairness) == (0.55, 0.7)
    assert parse_snapshot(snapshot_to_dict(snap)).policy.weights == snap.policy.weights


def test_a_policy_section_given_in_part_takes_the_types_defaults() -> None:
    base = {"nodes": [{"name": "n0", "cpu_milli": 1000, "memory_mib": 1000}]}
    whole = parse_snapshot(base).policy
    part = parse_snapshot({**base, "policy": {"fair_sharing": {}, "target_workload": {}}}).policy
    assert (part.fair_sharing, part.target_workload) == (whole.fair_sharing,
                                                         whole.target_workload)
