"""``berth serve`` runs the controller in a child process of its own (``--one-process``: in
the webhook's). The child is a real ``berth serve --no-webhook``; here its apiserver is a port
nobody listens on, so its watches fail and retry, which is all these tests need: the process
tree, the joined /metrics, restarts, and stopping (SIGTERM in order; the child outliving no
parent)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from admission.certs import write_bundle
from admission.metrics import family_names, without_families

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "config" / "policy" / "sample-policy.yaml"

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}",
            insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def test_families_are_joined_without_declaring_one_twice() -> None:
    own = (b"# HELP a_total A.\n# TYPE a_total counter\na_total 1.0\n"
           b"# HELP b B.\n# TYPE b gauge\nb 2.0\n")
    other = (b"# HELP b B.\n# TYPE b gauge\nb 3.0\n"
             b"# HELP c C.\n# TYPE c gauge\nc{x=\"# HELP \"} 4.0\n"
             b"# the controller said this\n")
    assert family_names(own) == {b"a_total", b"b"}
    joined = own + without_families(other, family_names(own))
    assert joined.count(b"# HELP b ") == 1 and b"b 3.0" not in joined
    assert b"c{x=\"# HELP \"} 4.0" in joined and b"# the controller said this" in joined


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> bytes:
    """A process's command line, its arguments joined by spaces (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _wait(what: str, predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Serve:
    def __init__(self, tmp: Path, *extra: str) -> None:
        bundle = write_bundle(tmp / "certs", "127.0.0.1")
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG.format(port=_free_port()))
        self.port = _free_port()
        self.ctx = ssl.create_default_context(cafile=str(bundle.ca_cert))
        self.log = tmp / "serve.log"
        entry = "from admission.cli import main; raise SystemExit(main())"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", entry, "serve", "--policy", str(SAMPLE), "--cert-dir",
             str(tmp / "certs"), "--port", str(self.port), "--kubeconfig", str(kubeconfig),
             "--namespace", "berth-test", "--identity", "t", *extra],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
            start_new_session=True)
        _wait("berth serve to be ready", self._ready)

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            return self.get("/readyz").startswith("ready")
        except OSError:
            return False

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}{path}", context=self.ctx,
                                    timeout=5) as r:
            return str(r.read().decode())

    def metrics_with(self, family: str) -> str:
        text = ""

        def has() -> bool:
            nonlocal text
            text = self.get("/metrics")
            return f"# HELP {family} " in text

        _wait(f"{family} in /metrics", has)
        return text

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.mark.slow
def test_the_controller_runs_in_a_child_and_stops_first(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        children = _children(serve.proc.pid)
        assert len(children) == 1, children
        child = children[0]
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        assert b"--no-webhook" in cmdline
        # One scrape: the webhook's families and the controller's, none declared twice.
        text = serve.metrics_with("berth_leader")
        assert _nice(child) == _nice(serve.proc.pid) + 10  # --controller-nice's default
        assert "# HELP berth_webhook_review_seconds " in text
        assert "berth_controller_process_restarts_total 0.0" in text
        names = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(timeout=60) == 0, serve.log.read_text()
        assert not _alive(child)
        log = serve.log.read_text()
        assert "controller process stopped (exit 0); draining the webhook" in log, log
    finally:
        serve.close()


@pytest.mark.slow
def test_a_dead_controller_is_started_again_and_the_webhook_keeps_serving(
        tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        first = _children(serve.proc.pid)[0]
        os.kill(first, signal.SIGKILL)
        _wait("a new controller process",
              lambda: [p for p in _children(serve.proc.pid) if p != first and _alive(p)])
        assert serve.get("/healthz").strip() == "ok"
        text = serve.metrics_with("berth_leader")
        assert "berth_controller_process_restarts_total 1.0" in text
        assert "exited with -9; starting it again" in serve.log.read_text()
    finally:
        serve.close()


@pytest.mark.slow
def test_the_controller_does_not_outlive_its_parent(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        child = _children(serve.proc.pid)[0]
        serve.proc.kill()  # the parent alone, not its process group
        serve.proc.wait()
        _wait("the orphaned controller to exit", lambda: not _alive(child), timeout=20)
    finally:
        serve.close()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_stops_both_in_order(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        child = _children(serve.proc.pid)[0]
        serve.metrics_with("berth_leader")  # the child is up and serving
        os.killpg(serve.proc.pid, signal.SIGINT)  # as a terminal does: the whole group
        assert serve.proc.wait(timeout=60) == 0, serve.log.read_text()
        assert not _alive(child)
        assert "controller process stopped (exit 0)" in serve.log.read_text()
    finally:
        serve.close()


@pytest.mark.slow
def test_one_process_keeps_the_controller_in_the_webhooks_process(tmp_path: Path) -> None:
    serve = Serve(tmp_path, "--one-process")
    try:
        assert "# HELP berth_leader " in serve.metrics_with("berth_leader")
        # no controller child (``--no-webhook``): the only children are the solver's worker,
        # started with the controller, and multiprocessing's helper beside it
        deadline = time.monotonic() + 60
        while not (cmdlines := [c for c in map(_cmdline, _children(serve.proc.pid)) if c]) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cmdlines and all(b"multiprocessing" in c for c in cmdlines), cmdlines
        assert not any(b"--no-webhook" in c for c in cmdlines)
    finally:
        serve.close()
