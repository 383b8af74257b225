"""``berth solve``: the table, the JSON, and bad input reported without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "snapshot.yaml"
POLICY = REPO / "config" / "policy" / "sample-policy.yaml"


def test_table_shows_admitted_deferred_and_stats(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--time-limit", "2"]) == 0
    out = capsys.readouterr().out
    for text in ("Admitted gangs", "team-a/llm-pretrain", "worker-0", "GPU0×250m",
                 "Deferred gangs", "Solver", "status"):
        assert text in out


def test_json_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--json", "--solver", "fgd"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["solver"] == "fgd"
    names = {g["gang"] for g in data["admitted"]} | {d["gang"] for d in data["deferred"]}
    assert names == {"team-a/llm-pretrain", "team-b/chat-serving", "team-b/finetune"}


def test_policy_replaces_tenants_and_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", str(POLICY), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["solver"] == "cpsat"


def _bad(tmp_path: Path, text: str, name: str = "snap.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_invalid_snapshot_names_file_path_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _bad(tmp_path, "nodes:\n  - {name: n, cpu_milli: 1, memory_mib: 1}\n"
                       "gangs:\n  - {name: g, tenant: t, pods: [{name: p, gpu_count: 1, "
                       "gpu_milli: 1500}, {name: q, cpu: 3}]}\n")
    assert main(["solve", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}: gangs[0].pods[0].gpu_milli: must be in (0, 1000], got 1500" in err
    assert f"{p}: gangs[0].pods[1].cpu: unknown field (did you mean 'cpu_milli'?)" in err
    assert "2 errors; nothing was solved" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, expect", [
    ("nodes: [\n", "not valid YAML or JSON"),
    ("[]", "the snapshot must be a mapping"),
    ("", "the snapshot must be a mapping"),
    ('{"nodes": [{"name": "n"}]}', "nodes[0].cpu_milli: is required"),
])
def test_malformed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                         expect: str) -> None:
    p = _bad(tmp_path, text, "snap.json")
    assert main(["solve", str(p)]) == 2
    err = capsys.readouterr().err
    assert expect in err and str(p) in err and "Traceback" not in err


def test_missing_file_and_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: cannot read" in capsys.readouterr().err
    assert main(["solve", str(EXAMPLE), "--time-limit", "0"]) == 2
    assert "--time-limit must be > 0" in capsys.readouterr().err


def test_invalid_policy_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _bad(tmp_path, "apiVersion: berth.dev/v1alpha1\nkind: Policy\n", "policy.yaml")
    assert main(["solve", str(EXAMPLE), "--policy", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and "nothing was solved" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["solve", str(EXAMPLE), "--solver"], ["simulate", "--policy"]])
def test_solver_choices_are_the_solver_names(argv: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "magic"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "choose from 'cpsat', 'fgd', 'bestfit', 'firstfit', 'random'" in err
