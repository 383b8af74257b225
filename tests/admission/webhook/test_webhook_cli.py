"""`berth webhook` as a process: serves over TLS, stops cleanly on SIGTERM, and explains bad
arguments in one line (exit 2, no traceback)."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from review_helpers import ROOT, SAMPLE, fixture

from admission.certs import write_bundle
from admission.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _berth(*args: str) -> subprocess.Popen[str]:
    # As the `berth` entry point does (``-m admission.cli`` would make a second UsageError).
    entry = "from admission.cli import main; raise SystemExit(main())"
    return subprocess.Popen([sys.executable, "-c", entry, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_webhook_process_serves_tls_and_stops_on_sigterm(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "certs", "127.0.0.1")
    port = _free_port()
    proc = _berth("webhook", "--policy", str(SAMPLE), "--cert-dir", str(tmp_path / "certs"),
                  "--port", str(port))
    ctx = ssl.create_default_context(cafile=str(bundle.ca_cert))
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                with urllib.request.urlopen(f"{base}/readyz", context=ctx, timeout=1) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "berth webhook did not become ready"
                time.sleep(0.2)
        request = urllib.request.Request(
            f"{base}/mutate-pods", data=json.dumps(fixture("kueue-pod.json")).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, context=ctx, timeout=5) as r:
            assert json.loads(r.read())["response"]["patchType"] == "JSONPatch"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "draining" in err


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("bad-policy", "--policy: the policy is not valid"),
        ("no-certs", "--cert-dir:"),
        ("bad-port", "--port must be 1..65535"),
    ],
)
def test_webhook_refuses_bad_arguments_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, needle: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(SAMPLE.read_text() if setup != "bad-policy" else "tenants: []\n")
    certs = tmp_path / "certs"
    if setup != "no-certs":
        write_bundle(certs, "127.0.0.1")
    port = "0" if setup == "bad-port" else str(_free_port())
    assert main(["webhook", "--policy", str(policy), "--cert-dir", str(certs),
                 "--port", port]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_webhook_explains_a_missing_uvloop_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    write_bundle(tmp_path / "certs", "127.0.0.1")
    assert main(["webhook", "--policy", str(SAMPLE), "--cert-dir", str(tmp_path / "certs"),
                 "--port", str(_free_port()), "--event-loop", "uvloop"]) == 2
    err = capsys.readouterr().err
    assert "--event-loop: uvloop cannot be imported" in err and "Traceback" not in err
