"""JSON regression instances (tests/regressions/*.json): each holds a snapshot, what it is
about, and what every plan for it must satisfy. All solvers' plans must pass the checker; the
CP-SAT plan must meet the expectations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from solver.api import solve
from solver.checker import check
from solver.names import SolverName
from solver.schema import parse_snapshot

CASES = sorted((Path(__file__).resolve().parents[1] / "regressions").glob("*.json"))


def test_there_are_regression_instances() -> None:
    assert CASES, "tests/regressions/ holds no *.json instances"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_regression(path: Path) -> None:
    doc: dict[str, Any] = json.loads(path.read_text())
    s = parse_snapshot(doc["snapshot"])
    for name in SolverName:
        plan = solve(s, solver=name, time_limit=2.0)
        assert not check(s, plan), (name, [str(v) for v in check(s, plan)])
    plan = solve(s, time_limit=2.0)
    expect = doc["expect"]
    got = plan.admitted_names
    assert set(expect.get("admitted", [])) <= got, doc["description"]
    assert not set(expect.get("deferred", [])) & got, doc["description"]
    if "admitted_count" in expect:
        assert len(got) == expect["admitted_count"], doc["description"]
    if "deferred_reason_prefix" in expect:
        assert all(d.reason.startswith(expect["deferred_reason_prefix"]) for d in plan.deferred)
    for gang, nodes in expect.get("nodes", {}).items():
        placed = plan.placement(gang)
        assert placed is not None and sorted(p.node for p in placed.pods) == sorted(nodes)
