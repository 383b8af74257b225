"""The simulator's shell reports bad input as its own error; ``berth simulate`` prints that
message unchanged as a usage error (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli import UsageError, main
from admission.simulate import (
    Contender,
    SimulateError,
    TraceFileError,
    build_configs,
    load_trace_scenario,
    parse_seeds,
    replay_fgd,
)

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,1000,1024,2,1000,,LS,Running,0,100,0\n"
    "p1,1000,1024,1,500,,LS,Running,10,300,10\n"
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "n.csv").write_text(NODES)
    (tmp_path / "p.csv").write_text(PODS)
    return str(tmp_path / "n.csv"), str(tmp_path / "p.csv")


def test_the_shell_raises_its_own_error_and_the_command_keeps_the_message(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = files
    with pytest.raises(SimulateError) as seeds:
        parse_seeds("42,x")
    with pytest.raises(SimulateError) as policy:
        build_configs([Contender("nope")], window_s=5.0, time_limit_s=1.0, seed=0)
    missing = str(tmp_path / "missing.csv")
    with pytest.raises(TraceFileError) as trace:
        load_trace_scenario(nodes, missing, tenants=4, time_scale=1.0, speedup=1.0)
    assert isinstance(trace.value, SimulateError)
    for error in (seeds.value, policy.value, trace.value):
        assert not isinstance(error, UsageError)
    cases = [
        (["--nodes", nodes, "--pods", pods, "--seeds", "42,x"], seeds.value),
        (["--mode", "timed", "--nodes", nodes, "--pods", pods, "--compare", "nope"],
         policy.value),
        (["--mode", "timed", "--nodes", nodes, "--pods", missing], trace.value),
    ]
    for argv, error in cases:
        assert main(["simulate", *argv]) == 2
        assert capsys.readouterr().err == f"berth simulate: {error}\n"


def test_replay_fgd_takes_typed_arguments(files: tuple[str, str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fgd.json"
    report = replay_fgd(nodes_file=files[0], pods_file=files[1], policy="bestfit", window=1,
                        seeds=[1, 2], arrival=1.3, time_limit=1.0, objective="packing",
                        orders=None, json_path=out, plot_path=None)
    assert json.loads(out.read_text()) == report
    assert report["seeds"] == [1, 2] and report["pods_file"] == files[1]
    assert f"wrote {out}" in capsys.readouterr().err
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("sn,cpu_milli,memory_mib,gpu,model\nc0,1000,1024,0,\n")
    with pytest.raises(SimulateError, match="no node has a GPU"):
        replay_fgd(nodes_file=str(cpu_only), pods_file=files[1], policy="fgd", window=1,
                   seeds=[1], arrival=1.3, time_limit=1.0, objective="packing", orders=None,
                   json_path=None, plot_path=None)
