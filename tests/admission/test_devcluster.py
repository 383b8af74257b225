"""Unit tests of the local control plane's parts that need no upstream binary: certificates,
fake node manifests, version pins, process-group teardown and the CLI's input checks. The
cluster itself is exercised by the e2e suite (e2e/tests)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission.cli import main
from admission.devcluster import binaries, processes
from admission.devcluster.nodes import FakeGpuNode, gpu_fleet
from admission.devcluster.pki import write_cluster_pki, write_serving_pair


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_pki_chain_and_identities(tmp_path: Path) -> None:
    pki = write_cluster_pki(tmp_path)
    ca = _load(pki.ca_cert)
    api = _load(pki.apiserver_cert)
    admin = _load(pki.admin_cert)
    for cert in (api, admin):
        cert.verify_directly_issued_by(ca)  # raises if the signature or issuer is wrong
    sans = api.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    eku = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    org = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    assert org == "system:masters"
    assert ca.subject.rfc4514_string() == "CN=berth-dev-cluster-ca"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length is None
    assert [str(n) for n in sans.get_values_for_type(x509.DNSName)] == [
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    for cert in (ca, api, admin):  # a week, from five minutes ago
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert abs(life - dt.timedelta(days=7, minutes=5)) < dt.timedelta(seconds=2)
    for key in (pki.ca_key, pki.apiserver_key, pki.admin_key, pki.sa_key):
        assert key.stat().st_mode & 0o077 == 0, f"{key} readable by others"
    assert b"PUBLIC KEY" in pki.sa_pub.read_bytes()


def test_serving_pair_is_issued_by_the_cluster_ca(tmp_path: Path) -> None:
    pki = write_cluster_pki(tmp_path / "pki")
    crt, key = write_serving_pair(pki, tmp_path / "hook", cn="hook")
    _load(crt).verify_directly_issued_by(_load(pki.ca_cert))
    assert key.stat().st_mode & 0o077 == 0


def test_fleet_layout_and_manifest() -> None:
    fleet = gpu_fleet(blocks=2, racks_per_block=3, nodes_per_rack=4, gpus_per_node=8,
                      nvlink_domains_per_node=2)
    assert len(fleet) == 24
    assert len({n.name for n in fleet}) == 24
    m = fleet[0].manifest()
    assert m["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert m["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert m["metadata"]["labels"]["topology.kubernetes.io/rack"] == "b0-r0"
    assert m["metadata"]["labels"]["topology.kubernetes.io/block"] == "b0"
    assert "nvidia.com/gpu.shared" not in m["status"]["capacity"]
    shared = gpu_fleet(gpus_per_node=8, shared_slots_per_gpu=4)[0].manifest()
    assert shared["status"]["allocatable"]["nvidia.com/gpu.shared"] == "32"
    gpus = json.loads(m["metadata"]["annotations"]["berth.dev/gpus"])
    assert [g["nvlink_domain"] for g in gpus] == ["nvl0"] * 4 + ["nvl1"] * 4


def test_unknown_topology_level_is_named() -> None:
    with pytest.raises(ValueError, match="unknown topology level 'row'"):
        FakeGpuNode(name="x", topology={"row": "1"}).manifest()


def test_versions_file_pins_every_component() -> None:
    pins = binaries.read_versions()
    for key, _ in binaries.COMPONENTS.values():
        assert pins[key].startswith("v"), key


def test_malformed_versions_line_is_reported_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "versions.env"
    f.write_text("# pins\nKUBERNETES_VERSION=v1.34.4\nETCD_VERSION\n")
    with pytest.raises(ValueError, match=r"versions.env:3: expected KEY=VALUE"):
        binaries.read_versions(f)


def test_missing_binary_names_the_build_command(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_E2E_CACHE", str(tmp_path))
    with pytest.raises(binaries.MissingBinary, match=r"e2e/build\.sh kubernetes"):
        binaries.binary("kube-apiserver")


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    # A parent that forks a child ignoring SIGTERM: both must be gone after stop().
    script = ("import subprocess, time; "
              "subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 60']); time.sleep(60)")
    proc, rec = processes.start("forker", [sys.executable, "-c", script], tmp_path)
    time.sleep(0.5)
    assert processes.is_running(rec)
    processes.stop(rec, proc, grace=1.0)
    assert not processes.group_alive(rec.pgid)
    assert proc.poll() is not None


def test_stop_from_another_process_checks_the_executable(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        wrong = processes.ProcessRecord(name="x", pid=proc.pid, pgid=proc.pid,
                                        exe="/bin/not-sleep", log="")
        assert not processes.is_running(wrong)
        right = processes.ProcessRecord(name="x", pid=proc.pid, pgid=proc.pid,
                                        exe=os.path.realpath("/bin/sleep"), log="")
        assert processes.is_running(right)
        processes.stop(right)
        proc.wait(timeout=5)
    finally:
        proc.kill()


def test_dev_cluster_rejects_bad_counts(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    assert main(["dev-cluster", "--dir", str(tmp_path), "up", "--gpus", "0"]) == 2
    assert "--gpus must be between 1 and 64, got 0" in capsys.readouterr().err


def test_dev_cluster_status_without_a_cluster(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    assert main(["dev-cluster", "--dir", str(tmp_path), "status"]) == 1
    assert "no cluster recorded" in capsys.readouterr().out


def test_dev_cluster_up_without_binaries_says_what_to_build(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_E2E_CACHE", str(tmp_path / "empty-cache"))
    assert main(["dev-cluster", "--dir", str(tmp_path / "c"), "up"]) == 2
    err = capsys.readouterr().err
    assert "is not built" in err and "e2e/build.sh" in err


def test_build_scripts_parse_and_refuse_unknown_components(tmp_path: Path) -> None:
    e2e = binaries.REPO_ROOT / "e2e"
    for script in ("build.sh", "ci.sh", "kind/run.sh"):
        done = subprocess.run(["bash", "-n", str(e2e / script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script}: {done.stderr}"
    done = subprocess.run([str(e2e / "build.sh"), "kubelet"], capture_output=True, text=True,
                          env={**os.environ, "BERTH_E2E_CACHE": str(tmp_path)}, timeout=30)
    assert done.returncode == 2
    assert "unknown component: kubelet" in done.stderr
    where = subprocess.run([str(e2e / "build.sh"), "--bin-dir", "kubectl"], capture_output=True,
                           text=True, env={**os.environ, "BERTH_E2E_CACHE": str(tmp_path)},
                           timeout=30)
    version = binaries.read_versions()["KUBERNETES_VERSION"]
    assert where.stdout.strip() == f"{tmp_path}/kubectl-{version}/bin"


def test_built_binary_reports_a_build_that_cannot_run(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty cache and no Go on PATH: the build is tried and its failure named, not hidden.
    monkeypatch.setenv("BERTH_E2E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(binaries.MissingBinary) as failed:
        binaries.built_binary("helm", log=tmp_path / "build.log")
    assert "build.sh helm` failed" in str(failed.value) and "needs Go" in str(failed.value)
    assert (tmp_path / "build.log").read_text()


def test_built_binary_uses_a_built_component_without_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_E2E_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")  # a build attempt could not even start bash
    home = binaries.component("helm").home
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "helm").write_text("#!/bin/sh\n")
    (home / ".complete").touch()
    assert binaries.built_binary("helm") == home / "bin" / "helm"
    with pytest.raises(KeyError):
        binaries.built_binary("no-such-tool")


def test_kueue_pod_integration_gates_follow_the_version() -> None:
    from admission.devcluster.kueue import pod_integration_gates
    # On by default from v0.19: a preempted single-pod Workload whose pod was still gated
    # would never be requeued; Berth's devcluster turns it off there and leaves older ones be.
    assert pod_integration_gates("v0.19.2") == {"SkipReassignmentForPodOwnedWorkloads": False}
    assert pod_integration_gates("v1.0.0") == {"SkipReassignmentForPodOwnedWorkloads": False}
    assert pod_integration_gates("v0.18.3") == {}
    assert pod_integration_gates("v0.14.8") == {}
    with pytest.raises(ValueError, match=r"not vMAJOR\.MINOR"):
        pod_integration_gates("main")
