"""Hand-written regressions: each hostile input or number a ``berth`` command once met with a
traceback, a hang, minutes of work or silent data loss, now refused at once with one message
naming the file or flag, the problem and the fix (exit status 2).

The cases that hung before run in a child process with a timeout, so that a regression fails
instead of stalling the suite; the rest run :func:`admission.cli.main` in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from admission.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "snapshot.yaml"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,1000,1024,2,1000,,LS,Running,0,100,0\n"
    "p1,1000,1024,1,500,,LS,Running,10,300,10\n"
)


def _refused(capsys: pytest.CaptureFixture[str], argv: Sequence[str], *expect: str) -> str:
    """``berth ARGV`` exits 2 at once, printing nothing on stdout (nothing ran) and a message
    holding every ``expect`` and no traceback."""
    started = time.perf_counter()
    rc = main(list(argv))
    elapsed = time.perf_counter() - started
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert "Traceback" not in err
    for text in expect:
        assert text in err, (text, err)
    assert out == ""
    return err


def _refused_in_child(argv: Sequence[str], *expect: str, timeout: float = 60) -> str:
    """As :func:`_refused`, in a child process killed after ``timeout`` seconds."""
    done = subprocess.run([sys.executable, "-m", "admission.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    for text in expect:
        assert text in done.stderr, (text, done.stderr)
    return done.stderr


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def _snapshot(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    return _write(tmp_path / "snap.yaml", text.replace(old, new, 1))


# --------------------------------------------------------------------------------------------
# berth solve: files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expect"), [
    (bytes(range(256)) * 4, "not UTF-8 text"),
    ("nodes: [{name: café}]\n".encode("latin-1"), "not UTF-8 text"),
    (b"nodes: []\x00\x00\x00", "binary data (a NUL byte)"),
    ("nodes: " + "[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
    ("{a: " * 100_000 + "1" + "}" * 100_000, "nested more than 64 levels deep"),
    ('{"nodes": ' + '[{"a": ' * 100_000 + "1" + "}]" * 100_000 + "}",
     "nested more than 64 levels deep"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
        for i in range(8)) + "nodes: *i\n", "the aliases expand the document past"),
    ("x: &x 1\nnodes: [" + ", ".join(["*x"] * 1_001) + "]\n", "more than 1000 aliases"),
    ("nodes: " + "9" * 5_000 + "\n", "a value cannot be read"),
    ("nodes: []\ngangs: [{name: g, tenant: t, wait_seconds: 2024-13-45}]\n",
     "a value cannot be read"),
])
def test_solve_refuses_hostile_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     data: str | bytes, expect: str) -> None:
    path = _write(tmp_path / "snap.yaml", data)
    err = _refused(capsys, ["solve", str(path)], str(path), expect)
    assert len(err.splitlines()) == 1


def test_solve_refuses_directories_missing_files_and_devices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, ["solve", str(tmp_path)], f"{tmp_path}: is a directory")
    _refused(capsys, ["solve", str(tmp_path / "nope.yaml")], "nope.yaml: cannot read: no such "
             "file")
    _refused(capsys, ["solve", str(_write(tmp_path / "e.yaml", ""))], "e.yaml: the snapshot "
             "must be a mapping")


def test_solve_does_not_read_a_device_forever() -> None:
    _refused_in_child(["solve", "/dev/zero"], "/dev/zero: is not a regular file", timeout=30)


def test_solve_reports_each_duplicate_key_with_both_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "dup.yaml", "nodes:\n  - name: n\n    cpu_milli: 1\n"
                  "    memory_mib: 1\n    cpu_milli: 2\ngangs: []\ngangs: []\n")
    err = _refused(capsys, ["solve", str(path)])
    assert f"{path}:5:5: nodes[0].cpu_milli: duplicate key (first at line 3)" in err
    assert f"{path}:7:1: gangs: duplicate key (first at line 6)" in err
    assert "2 errors; nothing was solved" in err
    json_dup = _write(tmp_path / "dup.json", '{"nodes": [], "nodes": []}')
    _refused(capsys, ["solve", str(json_dup)], "nodes: duplicate key (first at line 1)")


@pytest.mark.parametrize(("old", "new", "expect"), [
    ("cpu_milli: 96000", f"cpu_milli: {10**30}", "nodes[0].cpu_milli: must be <= 1000000000"),
    ("- {index: 0, model: NVIDIA-H100-80GB-HBM3,", f"- {{index: {10**30}, model: NVIDIA-H100,",
     "nodes[2].gpus[0].index: must be <= 1000000000"),
    ("memory_mib: 81920, nvlink_size", f"memory_mib: {10**20}, nvlink_size",
     "nodes[0].gpus.memory_mib: must be <= 1000000000"),
    ("weight: 2", "weight: .inf", "tenants[0].weight: must be a finite number"),
    ("weight: 2", "weight: 1.0e+400", "tenants[0].weight: must be a finite number"),
    ("wait_seconds: 600", "wait_seconds: -.inf", "gangs[0].wait_seconds: must be a finite"),
    ("priority: 10", f"priority: {-(10**24)}", "gangs[0].priority: must be in "
                                               "[-1000000000, 1000000000]"),
    ("quota_milli: 16000", f"quota_milli: {2**63}", "tenants[0].quota_milli: must be <= "),
])
def test_solve_refuses_huge_negative_and_non_finite_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
        expect: str) -> None:
    path = _snapshot(tmp_path, old, new)
    _refused(capsys, ["solve", str(path), "--solver", "bestfit"], f"{path}: {expect}")


def test_solve_bounds_the_pods_replicas_make(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    gangs = "".join(f"  - {{name: g{i}, tenant: t, pods: [{{name: p, replicas: 10000}}]}}\n"
                    for i in range(11))
    path = _write(tmp_path / "many.yaml", "nodes: []\ngangs:\n" + gangs)
    _refused(capsys, ["solve", str(path)], "gangs[10].pods[0].replicas: the gangs hold more "
             "than 100000 pods")


@pytest.mark.parametrize(("flag", "value", "expect"), [
    ("--time-limit", "inf", "--time-limit must be > 0 and at most 3600"),
    ("--time-limit", "nan", "--time-limit must be > 0"),
    ("--seed", "-1", "--seed must be in 0..2147483647"),
    ("--seed", str(2**40), "--seed must be in 0..2147483647"),
    ("--workers", "1000000", "--workers must be in 1..256"),
])
def test_solve_bounds_its_numbers(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                                  expect: str) -> None:
    _refused(capsys, ["solve", str(EXAMPLE), f"{flag}={value}"], expect)


# --------------------------------------------------------------------------------------------
# berth simulate
# --------------------------------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path: Path) -> list[str]:
    n = _write(tmp_path / "n.csv", NODES)
    p = _write(tmp_path / "p.csv", PODS)
    return ["--nodes", str(n), "--pods", str(p)]


@pytest.mark.parametrize(("mode", "seeds", "expect"), [
    ("fgd", "-1", "--seeds: -1 is out of range"),
    ("fgd", "99999999999999999999", "--seeds: 99999999999999999999 is out of range"),
    ("timed", "99999999999999999999", "is out of range; each seed is a whole number in "
                                      "0..2147483647"),
    ("timed", "x", "--seeds: 'x' is not a whole number"),
    ("timed", "-5,1", "--seeds: -5 is out of range"),
    ("fgd", ",".join(["1"] * 101), "--seeds: more than 100 seeds"),
])
def test_simulate_seeds_in_every_mode(trace: list[str], capsys: pytest.CaptureFixture[str],
                                      mode: str, seeds: str, expect: str) -> None:
    _refused(capsys, ["simulate", "--mode", mode, *trace, "--policy", "bestfit",
                      f"--seeds={seeds}"], expect)


@pytest.mark.parametrize("seeds", ["x", "-1", "99999999999999999999"])
def test_simulate_default_mode_checks_the_seeds(capsys: pytest.CaptureFixture[str],
                                                seeds: str) -> None:
    _refused(capsys, ["simulate", f"--seeds={seeds}"], "--seeds: ")


@pytest.mark.parametrize(("mode", "flags", "expect"), [
    ("fgd", ["--window", str(10**12)], "--window: must be in 1..10000"),
    ("fgd", ["--orders", str(10**9)], "--orders: must be in 1..1000"),
    ("fgd", ["--time-limit", "inf"], "--time-limit: must be > 0 and at most 600"),
    ("timed", ["--time-limit", "nan"], "--time-limit: must be > 0"),
    ("timed", ["--until", "inf"], "--until: must be > 0 and at most 1e+12 seconds"),
    ("timed", ["--speedup", "0"], "--speedup: must be a factor in [1e-06, 1e+06]"),
    ("timed", ["--speedup", "inf"], "--speedup: must be a factor"),
    ("timed", ["--tenants", str(10**9)], "--tenants: must be in 1..26"),
    ("timed", ["--max-pending", str(10**9)], "--max-pending: must be in 1..10000"),
    ("timed", ["--compare", ",".join(["bestfit"] * 21)], "--compare: at most 20 policies"),
])
def test_simulate_bounds_each_size(trace: list[str], capsys: pytest.CaptureFixture[str],
                                   mode: str, flags: list[str], expect: str) -> None:
    _refused(capsys, ["simulate", "--mode", mode, *trace, *flags], expect)


@pytest.mark.parametrize(("mode", "flags", "expect"), [
    ("fgd", ["--arrival", "inf"], "--arrival: must be > 0 and at most 10"),
    ("fgd", ["--arrival", "1e9"], "--arrival: must be > 0 and at most 10"),
    ("timed", ["--window-s", "nan"], "--window-s: must be in"),
    ("timed", ["--time-scale", "inf"], "--time-scale: must be a factor"),
    ("timed", ["--window-s", "1e-300"], "--window-s: must be in [0.001, 86400]"),
])
def test_simulate_sizes_that_hung(tmp_path: Path, trace: list[str], mode: str,
                                  flags: list[str], expect: str) -> None:
    _refused_in_child(["simulate", "--mode", mode, *trace, *flags], expect)


def test_simulate_refuses_a_span_of_too_many_windows(tmp_path: Path, trace: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, ["simulate", "--mode", "timed", *trace, "--window-s", "0.001",
                      "--time-scale", "1e6"], "more than 1e+09 windows of 0.001 s")


def test_simulate_refuses_a_pod_list_that_would_take_millions_of_draws(tmp_path: Path) -> None:
    n = _write(tmp_path / "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},1000,1000,64,T4\n" for i in range(20)))
    p = _write(tmp_path / "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,0,0,1,1\n")
    _refused_in_child(["simulate", "--nodes", str(n), "--pods", str(p), "--arrival", "1"],
                      "--arrival: 1 x the GPU capacity", "more than 1000000")


@pytest.mark.parametrize(("row", "expect"), [
    ("n9,32000,131072,100000000,T4", "n.csv:4: column gpu: '100000000' is too large: at "
                                     "most 64"),
    ("n9,1e400,131072,1,T4", "n.csv:4: column cpu_milli: '1e400' must be a whole number"),
    ("n9,nan,131072,1,T4", "n.csv:4: column cpu_milli: 'nan'"),
    (f"n9,{10**30},131072,1,T4", "n.csv:4: column cpu_milli: '100000000000000000000...' is "
                                 "too large"),
    ("n9,-1e400,131072,1,T4", "column cpu_milli: '-1e400' must be a whole number >= 0"),
])
def test_simulate_refuses_huge_and_non_finite_trace_numbers(
        tmp_path: Path, row: str, expect: str) -> None:
    n = _write(tmp_path / "n.csv", NODES + row + "\n")
    p = _write(tmp_path / "p.csv", PODS)
    _refused_in_child(["simulate", "--nodes", str(n), "--pods", str(p)], expect)


def test_simulate_refuses_huge_pod_times(tmp_path: Path, trace: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path / "p.csv", PODS + f"p9,1,1,1,1000,,LS,Running,0,{10**30},0\n")
    _refused(capsys, ["simulate", "--mode", "timed", "--nodes", trace[1], "--pods", str(p)],
             "p.csv:4: column deletion_time:", "is too large")


def test_simulate_refuses_directories_and_devices(tmp_path: Path, trace: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, ["simulate", "--nodes", str(tmp_path), "--pods", trace[3]],
             "is a directory; give the CSV file inside it")
    _refused(capsys, ["simulate", "--nodes", trace[1], "--pods", "/dev/zero"],
             "/dev/zero: is not a regular file")


@pytest.mark.parametrize("mode", ["fgd", "timed"])
def test_simulate_checks_outputs_before_the_run(tmp_path: Path, trace: list[str], mode: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = ["simulate", "--mode", mode, *trace, "--policy", "bestfit"]
    _refused(capsys, [*run, "--json", str(tmp_path)], f"--json {tmp_path}: is a directory")
    missing = tmp_path / "no" / "such" / "x.json"
    _refused(capsys, [*run, "--json", str(missing)], f"the directory {missing.parent} does not "
             "exist")
    _refused(capsys, [*run, "--plot", str(tmp_path / "x.xyz")], "cannot draw a .xyz file")
    nodes = Path(trace[1])
    _refused(capsys, [*run, "--json", str(nodes)], "is the input file")
    assert nodes.read_text() == NODES  # not overwritten
    _refused(capsys, [*run, "--plot", str(nodes.parent / "x.png"), "--json",
                      str(nodes.parent / "x.png")], "--json and --plot both name")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_simulate_refuses_a_read_only_output_directory(
        tmp_path: Path, trace: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _refused(capsys, ["simulate", *trace, "--json", str(ro / "x.json")],
                 f"cannot write in {ro}")
    finally:
        ro.chmod(0o700)


def test_simulate_default_mode_checks_its_outputs(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, ["simulate", "--json", str(tmp_path / "no" / "x.json")], "does not exist")
    _refused(capsys, ["simulate", "--plot", str(tmp_path)], "is a directory")


# --------------------------------------------------------------------------------------------
# berth certs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "expect"), [
    ("", "--host: is empty"),
    (" ", "--host: is empty"),
    ("a..b", "has an empty label"),
    ("-x", "may not start or end with a hyphen"),
    ("a" * 300, "300 characters; a DNS name has at most 253"),
    ("a" * 64 + ".example.com", "has a label of 64 characters; at most 63"),
    ("https://berth.example.com", "is a URL or a path"),
    ("berth.example.com/mutate", "is a URL or a path"),
    ("127.0.0.1:8443", "has a port"),
    ("[::1]:8443", "has a port"),
    ("[::1]", "without brackets"),
    ("999.1.1.1", "is not a valid IPv4 address"),
    ("fe80::1%eth0", "drop the zone"),
    ("*.example.com", "is a wildcard"),
    ("under_score.example", "may hold only letters, digits and hyphens"),
    ("bücher.example", "xn-- form"),
])
def test_certs_refuses_bad_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 host: str, expect: str) -> None:
    _refused(capsys, ["certs", "--out", str(tmp_path / "c"), f"--host={host}"], "--host: ",
             expect)
    assert not (tmp_path / "c").exists()


def test_certs_checks_dns_days_and_paths(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = ["certs", "--out", str(tmp_path / "c"), "--host=127.0.0.1"]
    _refused(capsys, [*out, "--dns=a..b"], "--dns: 'a..b' has an empty label")
    _refused(capsys, [*out, "--days", str(10**9)], "--days must be in 1..36500")
    _refused(capsys, [*out, "--render-webhook-config", str(tmp_path)], "is a directory")
    _refused(capsys, [*out, "--render-webhook-config", str(tmp_path / "no" / "w.yaml")],
             "does not exist")
    f = _write(tmp_path / "file", "keep me")
    _refused(capsys, ["certs", "--out", str(f), "--host=x"], "is not a directory")
    assert f.read_text() == "keep me"
    assert not (tmp_path / "c").exists()


def test_certs_long_dns_names_and_ipv6_urls(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    long_name = "a" * 63 + "." + "b" * 60 + ".example"  # 135 characters: too long for a CN
    assert main(["certs", "--out", str(tmp_path), f"--host={long_name}"]) == 0
    cfg = tmp_path / "wh.yaml"
    assert main(["certs", "--out", str(tmp_path), "--host=::1", "--render-webhook-config",
                 str(cfg)]) == 0
    assert "https://[::1]:8443/mutate-pods" in cfg.read_text()
    capsys.readouterr()


# --------------------------------------------------------------------------------------------
# berth dev-cluster, berth agent
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [
    b"\xff\xfe garbage", b"", b"[" * 100_000, b'{"workdir": "/elsewhere"}',
    b"[]", json.dumps({"ports": {}, "processes": []}).encode(),
])
def test_dev_cluster_refuses_a_state_file_it_did_not_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], state: bytes) -> None:
    _write(tmp_path / "state.json", state)
    keep = _write(tmp_path / "precious.txt", "keep me")
    for action in ("down", "status", "up"):
        _refused(capsys, ["dev-cluster", "--dir", str(tmp_path), action], "state.json: ",
                 "nothing was stopped or deleted")
    assert keep.read_text() == "keep me"


def test_dev_cluster_refuses_a_state_file_naming_foreign_processes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ports = dict.fromkeys(("etcd_client", "etcd_peer", "apiserver", "controller_manager",
                           "scheduler", "kwok"), 1)
    # this very process as etcd: ``down`` would signal the test run's own process group
    rec = {"name": "etcd", "pid": os.getpid(), "pgid": os.getpid(), "exe": sys.executable,
           "log": "x"}
    state = {"workdir": str(tmp_path.resolve()), "ports": ports, "processes": [rec]}
    _write(tmp_path / "state.json", json.dumps(state))
    _refused(capsys, ["dev-cluster", "--dir", str(tmp_path), "down"], "processes[0]: ")
    assert (tmp_path / "state.json").exists()


@pytest.mark.parametrize(("flags", "expect"), [
    (["--blocks", "10000", "--racks", "10000"], "is 200000000 nodes; at most 10000"),
    (["--gpus", "100000000"], "--gpus must be between 1 and 64"),
    (["--gpus", "8", "--nvlink-domains", "9"], "--nvlink-domains must be between 1 and 8"),
    (["--gpu-product", "a b"], "--gpu-product 'a b': must be a label value"),
])
def test_dev_cluster_bounds_the_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      flags: list[str], expect: str) -> None:
    _refused(capsys, ["dev-cluster", "--dir", str(tmp_path), "up", *flags], expect)


@pytest.mark.parametrize(("flags", "expect"), [
    (["--interval", "nan"], "--interval must be > 0 and at most 86400"),
    (["--interval", "inf"], "--interval must be > 0"),
    (["--min-patch-interval", "inf"], "--min-patch-interval must be in [0, 86400]"),
])
def test_agent_bounds_its_intervals(capsys: pytest.CaptureFixture[str], flags: list[str],
                                    expect: str) -> None:
    _refused(capsys, ["agent", "--print", *flags], expect)
