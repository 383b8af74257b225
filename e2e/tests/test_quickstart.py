"""docs/quickstart.md, run as written.

The doc's shell blocks fenced as ```` ```sh quickstart ```` (the main path), ``quickstart-kueue``
or ``quickstart-volcano`` (a block may carry several of these words) are concatenated in
order and run by one ``bash -euo pipefail`` from the repository root, so exports carry from
block to block as they do in a reader's shell. The reader's environment is stood in for by a
home directory of the test's own: ``~/.cache/berth-e2e`` there links to the binaries already
built (so ``e2e/build.sh`` finds them cached and ``berth dev-cluster`` keeps its cluster under
that home, never a developer's), ``berth`` on PATH is this checkout's CLI. The dev cluster
picks free ports, so it runs beside the suite's own cluster or another test's.

Meanwhile a watch on the cluster's pods records every version of every pod in the tenants'
namespaces, and the test checks what the doc promises: the Job gang held by Berth's gate, then
Running, both pods in one rack; the nightly evaluation held with the condition
``berth.dev/Waiting``, reason ``Quota`` and the message the doc shows, and run once the
notebook is gone; and after ``berth dev-cluster down`` no process of the cluster left.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster import binaries
from admission.devcluster.nodes import TOPOLOGY_LABELS
from admission.devcluster.processes import ProcessRecord, group_alive

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth dev-cluster on this host"),
]

DOC = binaries.REPO_ROOT / "docs" / "quickstart.md"
WAITING = "berth.dev/Waiting"
TENANT_NAMESPACES = ("team-a", "team-b")
FENCE = re.compile(r"^```(\S*)(.*)$")


# --------------------------------------------------------------------------------------------
# The doc
# --------------------------------------------------------------------------------------------


def blocks(tag: str, text: str | None = None) -> list[str]:
    """The bodies of the doc's ```sh blocks whose info string names ``tag``, in order."""
    out: list[str] = []
    body: list[str] | None = None
    keep = False
    for line in (DOC.read_text() if text is None else text).splitlines():
        if body is None:
            m = FENCE.match(line)
            if m:
                body, keep = [], m.group(1) == "sh" and tag in m.group(2).split()
        elif line.startswith("```"):
            if keep:
                out.append("\n".join(body))
            body = None
        else:
            body.append(line)
    return out


def test_blocks_are_read_in_order_by_tag() -> None:
    text = "```sh quickstart\na\n```\n```sh\nb\n```\n```text quickstart\nc\n```\n" \
           "```sh quickstart quickstart-kueue\nd\n```\n"
    assert blocks("quickstart", text) == ["a", "d"]
    assert blocks("quickstart-kueue", text) == ["d"]


# --------------------------------------------------------------------------------------------
# A reader's shell
# --------------------------------------------------------------------------------------------


@dataclass
class Reader:
    """A home directory standing in for the reader's, and the environment of their shell."""

    home: Path
    env: dict[str, str]

    @property
    def workdir(self) -> Path:
        return self.home / ".cache" / "berth-e2e" / "dev-cluster"  # dev-cluster's default

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def records(self) -> list[ProcessRecord]:
        try:
            state = json.loads((self.workdir / "state.json").read_text())
        except (OSError, ValueError):
            return []
        return [ProcessRecord(**r) for r in state["processes"]]

    def berth(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["berth", *args], env=self.env, cwd=binaries.REPO_ROOT,
                              capture_output=True, text=True, timeout=120)


def _reader(tmp_path: Path, components: tuple[str, ...]) -> Reader:
    missing = [n for n in components if not binaries.component(n).built]
    if missing:
        pytest.fail(f"e2e: {', '.join(missing)} not built; build with: "
                    f"{binaries.REPO_ROOT / 'e2e' / 'build.sh'} {' '.join(missing)}",
                    pytrace=False)
    home = tmp_path / "home"
    cache = home / ".cache" / "berth-e2e"
    cache.mkdir(parents=True)
    for name in components:
        comp = binaries.component(name)
        (cache / comp.home.name).symlink_to(comp.home, target_is_directory=True)
    shims = tmp_path / "bin"
    shims.mkdir()
    berth = shims / "berth"  # what `pip install -e .` puts on PATH, for this checkout
    berth.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                     "'from admission.cli import main; raise SystemExit(main())' \"$@\"\n")
    berth.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("BERTH_E2E_CACHE", "KUBECONFIG", "BERTH_E2E_KEEP")}
    env.update(HOME=str(home), PATH=f"{shims}:{env.get('PATH', '/usr/bin:/bin')}",
               PYTHONPATH=str(binaries.REPO_ROOT))
    return Reader(home=home, env=env)


# --------------------------------------------------------------------------------------------
# What the cluster did
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One version of a pod as the watch delivered it."""

    gates: tuple[str, ...]
    phase: str
    node: str | None
    waiting: tuple[str, str, str] | None  # (status, reason, message) of berth.dev/Waiting
    assigned_node: str | None


@dataclass
class PodWatch:
    """Every version of every pod in the tenants' namespaces, from a watch on the cluster the
    doc starts (it connects once the kubeconfig appears and reconnects when the watch ends)."""

    reader: Reader
    pods: dict[str, list[Seen]] = field(default_factory=lambda: defaultdict(list))
    racks: dict[str, str] = field(default_factory=dict)  # node -> rack
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PodWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        rv: str | None = None  # resumed from the last event, so no version is missed
        while not self._stop.is_set():
            try:
                api = config.new_client_from_config(str(self.reader.kubeconfig))
                core = client.CoreV1Api(api)
                kwargs: dict[str, Any] = {"timeout_seconds": 5, "_request_timeout": 10}
                if rv:
                    kwargs["resource_version"] = rv
                for event in watch.Watch().stream(core.list_pod_for_all_namespaces, **kwargs):
                    if event["type"] == "ERROR":  # 410 Gone: list again from now
                        rv = None
                        break
                    rv = event["object"].metadata.resource_version
                    self._record(event["object"], core)
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                time.sleep(0.3)
            except Exception:  # not up yet, restarting, or gone: try again
                time.sleep(0.3)

    def _record(self, pod: Any, core: client.CoreV1Api) -> None:
        ns = pod.metadata.namespace
        if ns not in TENANT_NAMESPACES:
            return
        waiting = next(((cd.status, cd.reason or "", cd.message or "")
                        for cd in (pod.status.conditions or []) if cd.type == WAITING), None)
        seen = Seen(gates=tuple(g.name for g in pod.spec.scheduling_gates or []),
                    phase=pod.status.phase or "", node=pod.spec.node_name, waiting=waiting,
                    assigned_node=(pod.metadata.annotations or {}).get(
                        c.ANNOTATION_ASSIGNED_NODE))
        versions = self.pods[f"{ns}/{pod.metadata.name}"]
        if not versions or versions[-1] != seen:
            versions.append(seen)
        if seen.node and seen.node not in self.racks:
            labels = core.read_node(seen.node).metadata.labels or {}
            self.racks[seen.node] = labels.get(TOPOLOGY_LABELS["rack"], "?")

    def named(self, namespace: str, prefix: str) -> dict[str, list[Seen]]:
        return {k: list(v) for k, v in self.pods.items()
                if k.startswith(f"{namespace}/{prefix}")}

    def describe(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in sorted(self.pods.items()))


def run_doc(reader: Reader, tag: str, log: Path, timeout: float) -> PodWatch:
    """Run the doc's blocks tagged ``tag`` in one shell, watching the pods meanwhile. Fails
    with the shell's output and what was watched if any command fails; whatever happened,
    nothing of the cluster is left running."""
    script = "\n".join(blocks(tag))
    assert script, f"{DOC} has no ```sh {tag} blocks"
    pod_watch = PodWatch(reader)
    records: list[ProcessRecord] = []
    try:
        with pod_watch, log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-x", "-c", script], cwd=binaries.REPO_ROOT,
                env={**reader.env, "PS4": "+ "}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                records = reader.records() or records
                time.sleep(0.5)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                pytest.fail(f"the {tag} blocks ran past {timeout:.0f}s:\n{_tail(log)}"
                            f"\n--- pods seen:\n{pod_watch.describe()}", pytrace=False)
            assert proc.returncode == 0, (
                f"the {tag} blocks failed (exit {proc.returncode}):\n{_tail(log)}"
                f"\n--- pods seen:\n{pod_watch.describe()}")
        assert records, "the doc never started a dev cluster"
        left = [r.name for r in records if group_alive(r.pgid)]
        assert not left, f"still running after `berth dev-cluster down`: {left}"
        assert not reader.workdir.exists(), "`down` left the work directory"
        return pod_watch
    finally:
        if reader.workdir.exists():  # a failure before the doc's `down`: stop it here
            reader.berth("dev-cluster", "down")
        for r in records:
            if group_alive(r.pgid):
                os.killpg(r.pgid, signal.SIGKILL)


def _tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _gated_then_ran(versions: list[Seen]) -> bool:
    """First held by Berth's gate and unbound, later bound and Running (or already done)."""
    first = versions[0]
    held = c.SCHEDULING_GATE in first.gates and first.node is None
    ran = [i for i, s in enumerate(versions) if s.phase in ("Running", "Succeeded")]
    return held and bool(ran) and not versions[ran[0]].gates


# --------------------------------------------------------------------------------------------
# The doc's scenarios
# --------------------------------------------------------------------------------------------


def test_quickstart_as_written(tmp_path: Path) -> None:
    reader = _reader(tmp_path, ("kubernetes", "etcd", "kwok", "kubectl"))
    seen = run_doc(reader, "quickstart", tmp_path / "quickstart.log", timeout=420)
    out = (tmp_path / "quickstart.log").read_text()
    assert f"export KUBECONFIG={reader.kubeconfig}" in out
    # berth status read the policy ConfigMap up created and listed the waiting gang.
    assert "policy: ConfigMap berth-system/berth-policy" in out
    assert "team-b/job-nightly-eval" in out

    # The Job gang: gated at creation, then released whole, Running, both in one rack.
    gang = seen.named("team-a", "llama-pretrain-")
    assert len(gang) == 2, seen.describe()
    for name, versions in gang.items():
        assert _gated_then_ran(versions), f"{name}: {versions}"
        assert any(s.phase == "Running" for s in versions), f"{name}: {versions}"
    nodes = {next(s.node for s in v if s.node) for v in gang.values()}
    racks = {seen.racks[n] for n in nodes}
    assert len(racks) == 1, f"the gang spans racks {racks} (nodes {nodes})"

    # The nightly evaluation: waits on team-b's quota with the doc's reason, runs later.
    evals = seen.named("team-b", "nightly-eval-")
    assert len(evals) == 2, seen.describe()
    message = ("waiting: quota: tenant team-b would use 8500 of its 8000 milli-GPU and may "
               "not borrow; 0 gangs ahead")
    for name, versions in evals.items():
        waits = [s.waiting for s in versions if s.waiting and s.waiting[0] == "True"]
        assert ("True", "Quota", message) in waits, f"{name}: {versions}"
        assert _gated_then_ran(versions), f"{name}: {versions}"
        assert message in DOC.read_text(), "the doc no longer shows the message it promises"
    notebook = seen.named("team-b", "jupyter-alice")["team-b/jupyter-alice"]
    assert _gated_then_ran(notebook), notebook


@pytest.mark.parametrize("backend", ["kueue", "volcano"])
def test_quickstart_other_backends_as_written(tmp_path: Path, backend: str) -> None:
    reader = _reader(tmp_path, ("kubernetes", "etcd", "kwok", "kubectl", backend))
    seen = run_doc(reader, f"quickstart-{backend}", tmp_path / f"{backend}.log", timeout=420)
    job = "eval-sweep-" if backend == "kueue" else "mpi-allreduce-"
    pods = seen.named("team-a", job)
    assert len(pods) == 2, seen.describe()
    for name, versions in pods.items():
        assert _gated_then_ran(versions), f"{name}: {versions}"
        bound = next(s for s in versions if s.node)
        assert bound.node == bound.assigned_node, f"{name} not bound where Berth placed it"
