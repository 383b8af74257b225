"""The shell of the timed replay: the embedded default and ``--mode timed`` on CSV files."""

from __future__ import annotations

import argparse
import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from admission.cli import UsageError, build_parser, main
from admission.commands.simulate import run_default, run_timed
from admission.simulate import Contender, binned, parse_contenders

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,1000,1024,2,1000,,LS,Running,0,100,0\n"
    "p1,1000,1024,1,500,,LS,Running,10,300,10\n"
    "p2,1000,1024,1,1000,,BE,Running,12,60,12\n"
    "p3,1000,1024,2,1000,,BE,Running,20,80,20\n"
)


def _console() -> tuple[Console, StringIO]:
    buf = StringIO()
    return Console(file=buf, width=200), buf


def _files(tmp_path: Path, pods: str = PODS) -> argparse.Namespace:
    (tmp_path / "n.csv").write_text(NODES)
    (tmp_path / "p.csv").write_text(pods)
    return argparse.Namespace(nodes=str(tmp_path / "n.csv"), pods=str(tmp_path / "p.csv"),
                              json=str(tmp_path / "out.json"), plot=str(tmp_path / "out.png"),
                              compare="bestfit,firstfit-oblivious", tenants=2)


def test_timed_mode_on_csv_files_prints_writes_json_and_plot(tmp_path: Path) -> None:
    args = _files(tmp_path)
    console, buf = _console()
    assert run_timed(args, console=console) == 0
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["mode"] == "timed"
    names = [r["name"] for r in doc["results"]]
    assert names == ["bestfit", "firstfit-oblivious"]
    for r in doc["results"]:
        assert r["gangs"] == 4 and r["placed"] == 4 and r["waiting_at_end"] == 0
    # p3 needs both GPUs of n0, which p0 holds until 100: it waits from 20 to 100
    assert doc["results"][0]["wait_s"]["p99"] > 70
    assert (tmp_path / "out.png").stat().st_size > 10_000
    assert "bestfit" in buf.getvalue() and "team-a" in buf.getvalue()


def test_timed_mode_errors_name_file_line_and_fix(tmp_path: Path) -> None:
    args = _files(tmp_path, PODS.replace("p2,1000,1024,1,1000", "p2,1000,lots,1,1000"))
    with pytest.raises(UsageError, match=r"p\.csv:4: column memory_mib"):
        run_timed(args, console=_console()[0])
    no_times = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n"
    with pytest.raises(UsageError, match="creation_time and deletion_time"):
        run_timed(_files(tmp_path, no_times), console=_console()[0])
    with pytest.raises(UsageError, match="--nodes"):
        run_timed(argparse.Namespace(pods="x.csv"), console=_console()[0])
    with pytest.raises(UsageError, match="tenants"):
        run_timed(argparse.Namespace(**{**vars(_files(tmp_path)), "tenants": 0}),
                  console=_console()[0])


def test_embedded_default_compares_policies(tmp_path: Path) -> None:
    args = argparse.Namespace(compare="bestfit,bestfit-oblivious", json=str(tmp_path / "d.json"),
                              plot=str(tmp_path / "d.png"))
    console, buf = _console()
    assert run_default(args, console=console) == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    aware, blind = doc["results"]
    assert aware["slo_attainment"] == 1.0
    assert blind["slo_attainment"] < 1.0  # packing blind to interference misses SLOs
    assert aware["gangs"] == blind["gangs"] > 50
    assert (tmp_path / "d.png").exists()
    out = buf.getvalue()
    assert "embedded default" in out and "bestfit-oblivious" in out


def test_berth_simulate_without_scenario_runs_the_embedded_default(tmp_path: Path,
                                                                    capsys) -> None:  # type: ignore[no-untyped-def]
    plot, out = tmp_path / "p.png", tmp_path / "o.json"
    rc = main(["simulate", "--compare", "firstfit", "--plot", str(plot), "--json", str(out)])
    assert rc == 0
    assert plot.exists()
    doc = json.loads(out.read_text())
    assert doc["mode"] == "default" and [r["name"] for r in doc["results"]] == ["firstfit"]
    assert "embedded default" in capsys.readouterr().out


def test_berth_simulate_timed_flags_and_errors(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    ns = build_parser().parse_args(["simulate", "--mode", "timed", "--window-s", "10",
                                    "--compare", "cpsat,cpsat-oblivious", "--speedup", "20"])
    assert (ns.window_s, ns.speedup, ns.compare) == (10.0, 20.0, "cpsat,cpsat-oblivious")
    assert main(["simulate", "--mode", "timed"]) == 2
    assert "--nodes" in capsys.readouterr().err
    args = _files(tmp_path)
    assert main(["simulate", "--mode", "timed", "--nodes", args.nodes, "--pods", args.pods,
                 "--window-s", "0"]) == 2
    assert "--window-s" in capsys.readouterr().err


def test_contender_names() -> None:
    assert parse_contenders("cpsat, cpsat-oblivious,") == (Contender("cpsat"),
                                                          Contender("cpsat", False))
    assert Contender("bestfit", False).name == "bestfit-oblivious"
    told = parse_contenders("cpsat-nodeadlines,cpsat-oblivious-nodeadlines")
    assert told == (Contender("cpsat", deadlines=False),
                    Contender("cpsat", False, deadlines=False))
    assert [c.name for c in told] == ["cpsat-nodeadlines", "cpsat-oblivious-nodeadlines"]


def test_a_contender_without_deadlines_plans_nothing_ahead() -> None:
    from admission.simulate.timed import build_configs
    configs = build_configs(parse_contenders("cpsat,cpsat-nodeadlines"), window_s=5.0,
                            time_limit_s=1.0, seed=0)
    assert [(c.name, c.deadline_factor) for c in configs] == [("cpsat", 1.0),
                                                              ("cpsat-nodeadlines", None)]


def test_binned_means_of_a_step_series() -> None:
    series = [(0.0, 0.0), (30.0, 1.0), (90.0, 0.5)]
    assert binned(series, 120.0, 60.0) == pytest.approx([0.5, 0.75])
    assert binned(series, 150.0, 60.0) == pytest.approx([0.5, 0.75, 0.5])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--window-s", "-1"], "--window-s"),
        (["--time-limit", "0"], "--time-limit"),
        (["--max-pending", "0"], "--max-pending"),
        (["--until", "0"], "--until"),
        (["--compare", "cpsat,foo"], "unknown policy 'foo'"),
        (["--compare", ","], "--compare"),
        (["--tenants", "30"], "tenants"),
        (["--speedup", "0"], "speedup"),
        (["--time-scale", "-2"], "--time-scale"),
    ],
)
def test_bad_timed_flags_exit_2_naming_the_flag(tmp_path: Path, capsys, flags: list[str],  # type: ignore[no-untyped-def]
                                                named: str) -> None:
    args = _files(tmp_path)
    rc = main(["simulate", "--mode", "timed", "--nodes", args.nodes, "--pods", args.pods,
               *flags])
    err = capsys.readouterr().err
    assert rc == 2 and named in err and "Traceback" not in err


def test_the_queueing_baselines_run_in_timed_mode(tmp_path: Path) -> None:
    args = _files(tmp_path)
    args.compare = "kueue,volcano"
    console, buf = _console()
    assert run_timed(args, console=console) == 0
    assert "kueue" in buf.getvalue() and "volcano" in buf.getvalue()
    doc = json.loads((tmp_path / "out.json").read_text())
    assert [r["name"] for r in doc["results"]] == ["kueue", "volcano"]
    for r in doc["results"]:
        assert r["gangs"] == 4 and r["placed"] == 4 and r["waiting_at_end"] == 0
