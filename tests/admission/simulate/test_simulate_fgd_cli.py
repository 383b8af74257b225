"""``berth simulate --mode fgd``: the protocol on a small cluster, the JSON keys, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cli import main
from admission.simulate import TraceFileError, read_nodes, read_pods
from solver.simulate.protocol import arrival_order, replay
from solver.simulate.timed_scenario import TracePod

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,2,T4
n1,64000,262144,8,G2
n2,16000,65536,0,
"""

PODS_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
               "creation_time,deletion_time,scheduled_time\n")
PODS = PODS_HEADER + "".join(
    f"p{i:03d},{1000 + 500 * (i % 5)},2048,{[0, 1, 1, 2][i % 4]},"
    f"{[0, 500, 1000, 1000][i % 4]},{'T4' if i % 7 == 0 and i % 4 else ''},LS,Running,"
    f"{i},{i + 100},{i}\n"
    for i in range(40)
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return nodes, pods


def test_arrival_order_is_seeded_and_reaches_the_target(files: tuple[Path, Path]) -> None:
    pods = read_pods(files[1])
    capacity = 30_000
    a = arrival_order(pods, capacity, 1.3, seed=42)
    assert a == arrival_order(pods, capacity, 1.3, seed=42)
    assert a != arrival_order(pods, capacity, 1.3, seed=43)
    demand = [p.num_gpu * p.gpu_milli for p in a]
    assert sum(demand) >= 1.3 * capacity > sum(demand) - max(demand)
    assert {p.name for p in a[: len(pods)]} == {p.name for p in pods}  # every pod first
    assert len({p.name for p in a}) == len(a)  # copies are renamed
    cut = arrival_order(pods, capacity, 0.5, seed=42)
    assert 0.5 * capacity <= sum(p.num_gpu * p.gpu_milli for p in cut) < 0.5 * capacity + 2000


@pytest.mark.parametrize("policy", ["fgd", "bestfit", "firstfit", "random"])
def test_replay_accounts_for_every_pod(files: tuple[Path, Path], policy: str) -> None:
    nodes, pods = read_nodes(files[0]), read_pods(files[1])
    r = replay(nodes, pods, policy=policy, seed=1, arrival=1.3)
    assert r.capacity_milli == 10_000
    assert r.placed + r.dropped == len(r.arrived_milli)
    assert r.used_milli[-1] <= r.capacity_milli
    assert (r.used_milli <= r.arrived_milli).all()
    assert r.dropped > 0  # 130 % of capacity cannot all fit
    curve = r.alloc_pct_by_arrival()
    assert curve[0] <= curve[50] <= curve[100] <= 100.0


def test_cli_json_has_the_keys_benchmarks_read(files: tuple[Path, Path], tmp_path: Path) -> None:
    out, plot = tmp_path / "out.json", tmp_path / "out.png"
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--policy",
               "bestfit", "--seeds", "42,43", "--json", str(out), "--plot", str(plot)])
    assert rc == 0
    data = json.loads(out.read_text())
    for key in ("policy", "window", "seeds", "unallocated_pct_at_100", "alloc_pct_by_arrival",
                "wall_seconds"):
        assert key in data
    assert data["policy"] == "bestfit" and data["seeds"] == [42, 43] and data["window"] == 1
    assert 0 <= data["unallocated_pct_at_100"] <= 100
    assert plot.stat().st_size > 1000


@pytest.mark.parametrize(
    "text, where",
    [
        (NODES.replace("n1,64000", "n1,lots"), ":3: column cpu_milli:"),
        (NODES.replace("sn,", "node,"), ":1: column sn:"),
        (NODES.replace("8,G2", "8,"), ":3: column model:"),
        (NODES.replace("n1,", "n0,"), ":3: column sn:"),
        ("", ":1:"),
    ],
)
def test_bad_node_file_names_file_line_and_column(
    files: tuple[Path, Path], text: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files[0].write_text(text)
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--seeds", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{files[0]}{where}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "replace, where",
    [
        (("p003,2500,2048,2,1000", "p003,2500,2048,2,500"), ":5: column gpu_milli:"),
        (("p001,1500,2048,1,500", "p001,1500,-5,1,500"), ":3: column memory_mib:"),
        (("p001,1500,2048,1,500", "p001,1500,2048,1,1500"), ":3: column gpu_milli:"),
    ],
)
def test_bad_pod_file_names_file_line_and_column(
    files: tuple[Path, Path], replace: tuple[str, str], where: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert replace[0] in PODS
    files[1].write_text(PODS.replace(*replace))
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--seeds", "1"])
    assert rc == 2
    assert f"{files[1]}{where}" in capsys.readouterr().err


def test_bad_arguments_exit_2(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--nodes", str(files[0]), "--pods", str(files[1])]
    assert main([*base, "--seeds", "4x"]) == 2
    assert main([*base, "--window", "0"]) == 2
    assert main([*base, "--arrival", "0"]) == 2
    assert main([*base, "--policy", "cpsat", "--orders", "0"]) == 2
    assert main(["simulate", "--nodes", str(files[0])]) == 2
    assert main([*base[:2], "/nonexistent.csv", *base[3:]]) == 2
    assert "Traceback" not in capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(body=st.text(alphabet=st.sampled_from(list("ab,01-.|\n\"x ")), max_size=120))
def test_random_pod_files_never_crash(tmp_path: Path, body: str) -> None:
    path = tmp_path / "random.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + body)
    try:
        pods = read_pods(path)
    except TraceFileError as exc:
        assert str(path) in str(exc)
    else:
        assert all(isinstance(p, TracePod) for p in pods)


@pytest.mark.parametrize("objective", ["packing", "controller"])
def test_cpsat_in_windows(files: tuple[Path, Path], tmp_path: Path, objective: str) -> None:
    out = tmp_path / "cpsat.json"
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--policy",
               "cpsat", "--window", "8", "--seeds", "42", "--time-limit", "0.5",
               "--objective", objective, "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["window"] == 8 and data["objective"] == objective
    assert data["orders"] == (16 if objective == "packing" else None)
    assert data["experiment"] is (objective == "packing")
    greedy = replay(read_nodes(files[0]), read_pods(files[1]), policy="fgd", seed=42)
    assert data["per_seed"][0]["placed"] + data["per_seed"][0]["dropped"] == len(
        greedy.arrived_milli)


def test_cpsat_default_is_the_controllers_engine(files: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Without --objective the replay runs solver.api.solve (what berth serve runs), and the
    table says so; the packing experiment is labelled as one."""
    out = tmp_path / "cpsat.json"
    base = ["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--policy",
            "cpsat", "--window", "8", "--seeds", "42", "--time-limit", "0.2"]
    assert main([*base, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["objective"] == "controller" and data["experiment"] is False
    assert "controller's engine" in capsys.readouterr().out
    assert main([*base, "--objective", "packing"]) == 0
    assert "EXPERIMENT" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [[], ["--policy", "fgd"], ["--policy", "cpsat"],
                                   ["--policy", "cpsat", "--objective", "controller"]])
def test_orders_outside_the_packing_experiment_is_refused(
        files: tuple[Path, Path], extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--seeds", "1",
               "--orders", "4", *extra])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--orders" in err and "--objective packing" in err and "Traceback" not in err


@pytest.mark.parametrize("policy", ["kueue", "volcano"])
def test_the_queueing_baselines_are_refused_by_the_fgd_protocol(
    files: tuple[Path, Path], policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--policy",
               policy, "--seeds", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert f"--policy {policy}" in err and "--mode timed" in err
