"""The local control plane leaves nothing running: after ``berth dev-cluster down``, and after
the Python process that started a cluster is killed outright (SIGKILL: no atexit, no finally).
Each test starts a second cluster of its own beside the session's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from admission.devcluster.processes import ProcessRecord, group_alive, is_running
from e2e.helpers import BERTH, eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="tests the local process cluster, not an external one"),
]


def _berth(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BERTH, *args], capture_output=True,
                          text=True, timeout=timeout)


def _records(workdir: Path) -> list[ProcessRecord]:
    state = json.loads((workdir / "state.json").read_text())
    return [ProcessRecord(**r) for r in state["processes"]]


def test_dev_cluster_up_status_down_leaves_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "dev"
    records: list[ProcessRecord] = []
    try:
        up = _berth("dev-cluster", "--dir", str(workdir), "up", "--racks", "1", "--nodes", "1")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"export KUBECONFIG={workdir / 'kubeconfig'}" in up.stdout
        records = _records(workdir)
        assert {r.name for r in records} == {"etcd", "kube-apiserver", "kube-controller-manager",
                                             "kube-scheduler", "kwok"}
        assert all(is_running(r) for r in records)

        status = _berth("dev-cluster", "--dir", str(workdir), "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "apiserver /readyz          ok" in status.stdout

        again = _berth("dev-cluster", "--dir", str(workdir), "up")
        assert again.returncode == 2 and "already running" in again.stderr

        down = _berth("dev-cluster", "--dir", str(workdir), "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(is_running(r) or group_alive(r.pgid) for r in records)
        assert not workdir.exists()
    finally:
        # berth dev-cluster up detaches its cluster on purpose: never leak it on a failure.
        for r in records:
            if group_alive(r.pgid):
                os.killpg(r.pgid, signal.SIGKILL)


STARTER = """
import sys, time
from pathlib import Path
from admission.devcluster import DevCluster
DevCluster(workdir=Path(sys.argv[1]), die_with_parent=True).start()
print("started", flush=True)
time.sleep(600)
"""


def test_killing_the_starting_process_takes_the_cluster_with_it(tmp_path: Path) -> None:
    workdir = tmp_path / "orphan"
    records: list[ProcessRecord] = []
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(workdir)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()
        assert line.strip() == "started", f"starter said {line!r}; logs in {workdir / 'logs'}"
        records = _records(workdir)
        assert len(records) == 5 and all(is_running(r) for r in records)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=10)
        eventually(lambda: [r.name for r in records if group_alive(r.pgid)],
                   lambda alive: not alive, timeout=30,
                   what="every component to die with the process that started it")
    finally:
        if starter.poll() is None:
            starter.kill()
        for r in records:  # only reached with survivors when the assertion above failed
            if group_alive(r.pgid):
                os.killpg(r.pgid, signal.SIGKILL)
