"""The head-to-head harness in small (e2e/bench_compare.py ``--small``): the first 16 gangs of
the embedded default workload, compressed 40x, through kube-scheduler alone, the real Kueue,
the real Volcano, Berth, and Berth in front of Kueue, each on a fresh control plane whose kwok
ends every pod after its run time. Only correctness is asserted, per system: every gang
started or waits with a reason the cluster gives, no gang Berth released was ever partly
bound, no pod was lost, every create went through. Speed and quality are the
benchmark's (e2e/bench_compare.md), not this test's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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
    assert "simulated berth" in rows
    assert code == 0
