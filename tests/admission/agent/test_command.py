"""``berth agent``: printing the local inventory, publishing once, the loop, and plain errors."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, a100_mig, hgx_h100, pcie_l4
from test_publisher import RecordingApi

from admission.agent import schema as s
from admission.agent.inventory import FORMAT, inventory_from_dict
from admission.agent.loop import run_loop
from admission.agent.metadata import to_node_metadata
from admission.agent.publisher import Publisher
from admission.cli import UsageError, build_parser
from admission.commands import agent

REPO = Path(__file__).resolve().parents[3]
BERTH = [sys.executable, "-c", "from admission.cli import main; raise SystemExit(main())"]


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["agent", *argv])


def test_print_json_is_the_stable_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(parse("--once", "--print", "--json"), nvml=a100_mig()) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == FORMAT
    inv = inventory_from_dict(data)
    assert [len(g.mig) for g in inv.gpus] == [5, 2, 0, 0]


def test_print_for_people_shows_gpus_and_labels(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(parse("--once", "--print"), nvml=hgx_h100()) == 0
    out = capsys.readouterr().out
    assert "gpu 7: NVIDIA H100 80GB HBM3" in out
    assert "nvl0 (18 links)" in out
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in out


def test_print_respects_label_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(parse("--once", "--print", "--no-gfd-labels"), nvml=pcie_l4()) == 0
    out = capsys.readouterr().out
    assert "PCIe only" in out and "nvidia.com/" not in out


def test_without_nvidia_library_one_line_and_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(parse("--once", "--print"), nvml=FakeNvml([], library=False)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "NVIDIA" in lines[0] and "not usable" in lines[0]


def test_real_command_on_this_machine() -> None:
    """On a machine without NVIDIA's driver: one line, exit 1. With one: the inventory."""
    done = subprocess.run(
        [*BERTH, "agent", "--once", "--print", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    if done.returncode == 0:
        assert inventory_from_dict(json.loads(done.stdout)).gpus
    else:
        assert done.returncode == 1
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "NVIDIA" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv, message", [
    (("--once",), "--node NAME is required"),
    (("--json",), "--json goes with --print"),
    (("--print", "--interval", "0"), "--interval must be > 0"),
    (("--node", "n", "--min-patch-interval", "-1"), "--min-patch-interval"),
])
def test_usage_errors(argv: tuple[str, ...], message: str,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(UsageError, match=message):
        agent.run(parse(*argv), nvml=pcie_l4())


def test_usage_error_through_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    done = subprocess.run([*BERTH, "agent", "--once"],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "berth agent: --node NAME is required to publish (or set NODE_NAME, or use --print)")


def test_once_publishes_to_the_node(capsys: pytest.CaptureFixture[str]) -> None:
    api = RecordingApi()
    assert agent.run(parse("--once", "--node", "gpu-1"), nvml=hgx_h100(), api=api) == 0
    assert "gpu-1: patched" in capsys.readouterr().out
    assert api.node["metadata"]["labels"][s.LABEL_NVLINK_LARGEST] == "8"
    api.fail_next = 2
    assert agent.run(parse("--once", "--node", "gpu-1"), nvml=hgx_h100(), api=api) == 1
    assert "apiserver unreachable" in capsys.readouterr().out


def test_once_with_node_name_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    api = RecordingApi()
    assert agent.run(parse("--once"), nvml=pcie_l4(), api=api) == 0
    assert ("read", "from-env") in api.calls


def test_loop_reads_every_round_and_patches_only_on_change() -> None:
    nvml = hgx_h100()
    api = RecordingApi()
    stop = threading.Event()
    publisher = Publisher(api, "gpu-1", owns=s.is_agent_key, min_interval_s=0)
    with agent_session(nvml):
        rounds = run_loop(nvml, publisher, lambda inv: to_node_metadata(inv, gfd_labels=False),
                          interval_s=0.001, stop=stop, max_rounds=4)
    assert rounds == 4
    assert nvml.calls.count("nvmlDeviceGetCount") == 4
    assert len(api.patches) == 1


def test_loop_survives_nvml_errors() -> None:
    nvml = hgx_h100()
    api = RecordingApi()
    publisher = Publisher(api, "gpu-1", owns=s.is_agent_key)
    # Not initialised: every round's read fails with NVML's Uninitialized, and the loop goes on.
    rounds = run_loop(nvml, publisher, to_node_metadata, interval_s=0.001,
                      stop=threading.Event(), max_rounds=3)
    assert rounds == 3 and api.calls == []


def test_loop_stops_when_told() -> None:
    stop = threading.Event()
    stop.set()
    assert run_loop(hgx_h100(), Publisher(RecordingApi(), "n", owns=s.is_agent_key),
                    to_node_metadata, interval_s=60, stop=stop) == 0


def agent_session(nvml: FakeNvml):  # type: ignore[no-untyped-def]
    from admission.agent.inventory import nvml_session

    return nvml_session(nvml)
