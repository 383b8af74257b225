"""The head-to-head harness in small (e2e/bench_compare.py ``--small``): the first 16 gangs of
the embedded default workload, compressed 40x, through kube-scheduler alone, the real Kueue,
the real Volcano, Berth, and Berth in front of Kueue, each on a fresh control plane whose kwok
ends every pod after its run time. Only correctness is asserted, per system: every gang
started or waits with a reason the cluster gives, no gang Berth released was ever partly
bound, no pod was lost, every create went through; Berth held every gang behind its gate and,
in front of Kueue, released none before Kueue had admitted it. Speed and quality are the
benchmark's (e2e/bench_compare.md), not this test's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from admission import constants as c
from admission.backends.kueue import KUEUE_GATE_PREFIX
from e2e import bench_compare

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts its own control planes and berth serve on this host"),
]


def test_every_system_runs_the_small_replay_whole_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    code = bench_compare.main(["--small", "--json", str(out), "--out",
                               str(tmp_path / "compare.md")])
    rows = {r["system"]: r for r in json.loads(out.read_text())}
    assert set(bench_compare.SYSTEMS) <= set(rows), f"systems that did not run: " \
        f"{sorted(set(bench_compare.SYSTEMS) - set(rows))} (see the output above)"
    for name in bench_compare.SYSTEMS:
        r = rows[name]
        assert r["created"] == r["gangs"] == 16, (name, r["first_failures"])
        assert r["pods_lost"] == 0, name
        assert not r["waiting_without_reason"], (name, r["waiting_without_reason"])
        if name in bench_compare.BERTH_SYSTEMS:  # the others' are their own, reported
            assert r["partly_bound"] == 0, (name, r["partly_bound_max_s"])
        # a replay that started nothing would pass the checks above vacuously
        assert r["started"] >= 8, (name, r["waiting_reasons"])
        if name in bench_compare.BERTH_SYSTEMS:
            gates = r["gang_gates_s"]
            # every gang that started went through Berth's gate (the watch saw it gated)
            assert all(c.SCHEDULING_GATE in gates.get(g, {}) for g in r["gang_waits_s"]), name
    # in front of Kueue, Berth releases a gang only once Kueue has admitted it
    kueue_gate = f"{KUEUE_GATE_PREFIX}admission"
    for gang, gates in rows["berth-kueue"]["gang_gates_s"].items():
        if c.SCHEDULING_GATE in gates:
            assert gates.get(kueue_gate, float("inf")) <= gates[c.SCHEDULING_GATE], (gang, gates)
    assert "simulated berth" in rows
    assert code == 0
