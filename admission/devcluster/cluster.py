"""A real Kubernetes control plane as plain processes on 127.0.0.1.

etcd -> kube-apiserver -> kube-controller-manager + kube-scheduler -> kwok, each started only
when the one before is healthy, on ports the kernel picked free, with certificates made for this
cluster alone. kwok plays the kubelets: it keeps the fake GPU nodes Ready (renewing their
leases, so the node-lifecycle controller does not taint them) and moves pods bound to them to
Running. Everything lives in one work directory (certs, kubeconfig, etcd data, logs, and a
``state.json`` naming every process), so a cluster started by one command can be inspected and
stopped by another.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from admission.devcluster import binaries, processes
from admission.devcluster.pki import ClusterPki, write_cluster_pki
from admission.devcluster.processes import ProcessRecord, StartupError

STATE_FILE = "state.json"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


@dataclass
class Ports:
    etcd_client: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    controller_manager: int = 0
    scheduler: int = 0
    kwok: int = 0

    @classmethod
    def pick(cls) -> Ports:
        # All are picked before anything starts so that no two components race for one port.
        chosen: set[int] = set()
        values = []
        for _ in range(6):
            p = processes.free_port()
            while p in chosen:
                p = processes.free_port()
            chosen.add(p)
            values.append(p)
        return cls(*values)


#: Largest state file read (what ``start`` writes is under 2 KiB).
MAX_STATE_BYTES = 64 * 1024
#: The components a state file may name: the control plane, and what ``up --with-berth``
#: starts beside it (admission/devcluster/berth.py, kueue.py, volcano.py).
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
              "kueue", "vc-scheduler", "berth-serve")


class StateError(ValueError):
    """The work directory's state file is not one ``start`` wrote for it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}; it was not written by 'berth dev-cluster up' for "
                         "this directory, so nothing was stopped or deleted (check with ps, "
                         "then remove the file by hand)")
        self.path = path


def _parse_state(path: Path, state: object, workdir: Path) -> tuple[Ports, list[ProcessRecord]]:
    if not isinstance(state, dict):
        raise StateError(path, "not a JSON object")
    if state.get("workdir") != str(workdir):
        raise StateError(path, f"records the directory {str(state.get('workdir'))[:200]!r}")
    ports = state.get("ports")
    names = [f.name for f in fields(Ports)]
    if not isinstance(ports, dict) or set(ports) != set(names) or not all(
            type(ports[n]) is int and 0 <= ports[n] <= 65535 for n in names):
        raise StateError(path, "ports: expected a port number (0..65535) for each of "
                         + ", ".join(names))
    records = []
    procs = state.get("processes")
    if not isinstance(procs, list) or len(procs) > len(COMPONENTS):
        raise StateError(path, "processes: expected a list of the components started")
    for i, r in enumerate(procs):
        if not (isinstance(r, dict) and set(r) == {"name", "pid", "pgid", "exe", "log"}
                and r["name"] in COMPONENTS and type(r["pid"]) is int and r["pid"] > 1
                and r["pgid"] == r["pid"] and r["pid"] not in (os.getpid(), os.getpgrp())
                and isinstance(r["exe"], str)
                and isinstance(r["log"], str)):
            raise StateError(path, f"processes[{i}]: expected name (a component), pid > 1 "
                             "(not this process), pgid equal to pid, exe and log")
        records.append(ProcessRecord(**r))
    return Ports(**ports), records


@dataclass
class DevCluster:
    """One local control plane rooted at ``workdir``.

    ``die_with_parent`` ties every process to the Python process that started it (the pytest
    session); ``berth dev-cluster up`` turns it off so the cluster outlives the command.
    """

    workdir: Path
    with_kwok: bool = True
    die_with_parent: bool = True
    # kwok Stage documents (YAML) that replace its built-in pod stages, e.g. stages that end a
    # pod after a delay read from its annotations (e2e/bench_compare.py)
    kwok_stages: tuple[str, ...] = ()
    ports: Ports = field(default_factory=Ports)
    records: list[ProcessRecord] = field(default_factory=list)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------- paths
    @property
    def pki(self) -> ClusterPki:
        d = self.workdir / "pki"
        return ClusterPki(
            ca_cert=d / "ca.crt", ca_key=d / "ca.key",
            apiserver_cert=d / "apiserver.crt", apiserver_key=d / "apiserver.key",
            admin_cert=d / "admin.crt", admin_key=d / "admin.key",
            sa_key=d / "sa.key", sa_pub=d / "sa.pub",
        )

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    # ---------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 180.0) -> None:
        """Start every component in order; on any failure stop what was started and raise."""
        # Resolve every binary first: a missing build fails before anything is started.
        bins = {n: binaries.binary(n) for n in (
            "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")}
        if self.with_kwok:
            bins["kwok"] = binaries.binary("kwok")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.ports = Ports.pick()
        write_cluster_pki(self.workdir / "pki")
        self._write_kubeconfig()
        try:
            self._start_etcd(bins["etcd"], timeout)
            self._start_apiserver(bins["kube-apiserver"], timeout)
            self._start_controller_manager(bins["kube-controller-manager"], timeout)
            self._start_scheduler(bins["kube-scheduler"], timeout)
            if self.with_kwok:
                self._start_kwok(bins["kwok"], timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process, newest first, and forget them. Safe to call twice."""
        for record in reversed(self.records):
            processes.stop(record, self._procs.get(record.name))
        self.records.clear()
        self._procs.clear()
        self._save_state()

    def running(self) -> dict[str, bool]:
        return {r.name: processes.is_running(r) for r in self.records}

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Stop one component and start it again with the same ports (fault tests)."""
        record = next(r for r in self.records if r.name == name)
        processes.stop(record, self._procs.get(name))
        self.records.remove(record)
        self._procs.pop(name, None)
        starter: dict[str, Callable[[Path, float], None]] = {
            "etcd": self._start_etcd,
            "kube-apiserver": self._start_apiserver,
            "kube-controller-manager": self._start_controller_manager,
            "kube-scheduler": self._start_scheduler,
            "kwok": self._start_kwok,
        }
        starter[name](Path(record.exe), timeout)

    def wipe(self) -> None:
        """Stop everything and delete the work directory."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ---------------------------------------------------------------- state file
    def _save_state(self) -> None:
        if not self.workdir.is_dir():
            return
        state = {
            "workdir": str(self.workdir),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports.__dict__,
            "processes": [r.to_json() for r in self.records],
        }
        tmp = self.workdir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.workdir / STATE_FILE)

    @classmethod
    def load(cls, workdir: Path) -> DevCluster:
        """The cluster recorded in ``workdir`` by an earlier ``start`` (possibly elsewhere);
        :class:`StateError` when the state file is not one ``start`` wrote for ``workdir``
        (``down`` signals the recorded process groups and deletes the directory, so a file
        from elsewhere, or edited, must not drive it)."""
        path = workdir / STATE_FILE
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_STATE_BYTES + 1)
        except OSError as exc:
            raise StateError(path, f"cannot read: {exc.strerror or exc}") from None
        if len(raw) > MAX_STATE_BYTES:
            raise StateError(path, f"more than {MAX_STATE_BYTES} bytes")
        try:
            state = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise StateError(path, f"not valid JSON ({str(exc)[:80]})") from None
        cluster = cls(workdir=workdir, die_with_parent=False)
        cluster.ports, cluster.records = _parse_state(path, state, workdir)
        return cluster

    # ---------------------------------------------------------------- components
    def spawn(self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
              exe: str | None = None) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
        """Start one more process as part of this cluster (Berth, Kueue, Volcano): logged in
        ``logs/``, recorded in the state file, stopped with the cluster (newest first).
        ``name`` is one of :data:`COMPONENTS`, the names a state file may hold."""
        if name not in COMPONENTS:
            raise ValueError(f"{name!r} is not a component a state file may name "
                             f"({', '.join(COMPONENTS)})")
        proc, record = processes.start(
            name, argv, self.log_dir, env=env, exe=exe,
            preexec_fn=processes.die_with_parent if self.die_with_parent else None,
        )
        self._procs[name] = proc
        self.records.append(record)
        self._save_state()
        return proc, record

    def _start_etcd(self, exe: Path, timeout: float) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        proc, rec = self.spawn("etcd", [
            str(exe),
            "--name=berth-dev",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=berth-dev={peer}",
            # A throwaway store: durability is not worth an fsync per write on a shared disk.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ])
        processes.wait_until("etcd", lambda: processes.http_ok(f"{client}/health"),
                             timeout=timeout, proc=proc, record=rec)

    def _start_apiserver(self, exe: Path, timeout: float) -> None:
        pki = self.pki
        proc, rec = self.spawn("kube-apiserver", [
            str(exe),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            f"--secure-port={self.ports.apiserver}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={pki.apiserver_cert}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # The "kubernetes" Endpoints may not hold a loopback address; nothing in-cluster
            # needs them here, so the apiserver does not try to write them.
            "--endpoint-reconciler-type=none",
            # The default admission chain, webhooks included, stays on: the suite tests it.
        ])
        ctx = processes.https_context(pki.ca_cert, pki.admin_cert, pki.admin_key)
        processes.wait_until(
            "kube-apiserver", lambda: processes.http_ok(f"{self.server}/readyz", ctx),
            timeout=timeout, proc=proc, record=rec)

    def _start_controller_manager(self, exe: Path, timeout: float) -> None:
        pki = self.pki
        proc, rec = self.spawn("kube-controller-manager", [
            str(exe),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.controller_manager}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--use-service-account-credentials=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cluster-cidr={POD_CIDR}",
            # Otherwise it creates /usr/libexec/kubernetes/... on the host.
            f"--flex-volume-plugin-dir={self.workdir / 'flexvolume'}",
        ])
        url = f"https://127.0.0.1:{self.ports.controller_manager}/healthz"
        ctx = processes.https_context()
        processes.wait_until("kube-controller-manager", lambda: processes.http_ok(url, ctx),
                             timeout=timeout, proc=proc, record=rec)

    def _start_scheduler(self, exe: Path, timeout: float) -> None:
        proc, rec = self.spawn("kube-scheduler", [
            str(exe),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.scheduler}",
            # So its /metrics and /debug/pprof answer the admin's client certificate (the
            # benchmarks read them); without these it authenticates no one.
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
        ])
        url = f"https://127.0.0.1:{self.ports.scheduler}/healthz"
        ctx = processes.https_context()
        processes.wait_until("kube-scheduler", lambda: processes.http_ok(url, ctx),
                             timeout=timeout, proc=proc, record=rec)

    def _start_kwok(self, exe: Path, timeout: float) -> None:
        # An explicit (empty) config keeps a developer's ~/.kwok/kwok.yaml out of the cluster;
        # kwok then uses its built-in node and pod stages.
        conf = self.workdir / "kwok.yaml"
        conf.write_text(
            "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {}\n"
            + "".join(f"---\n{doc.strip()}\n" for doc in self.kwok_stages)
        )
        key, value = KWOK_NODE_ANNOTATION
        proc, rec = self.spawn("kwok", [
            str(exe),
            f"--config={conf}",
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
        ])
        url = f"http://127.0.0.1:{self.ports.kwok}/healthz"
        processes.wait_until("kwok", lambda: processes.http_ok(url),
                             timeout=timeout, proc=proc, record=rec)

    # ---------------------------------------------------------------- kubeconfig
    def _write_kubeconfig(self) -> None:
        pki = self.pki

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        conf = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "berth-dev", "cluster": {
                "server": self.server, "certificate-authority-data": b64(pki.ca_cert)}}],
            "users": [{"name": "berth-admin", "user": {
                "client-certificate-data": b64(pki.admin_cert),
                "client-key-data": b64(pki.admin_key)}}],
            "contexts": [{"name": "berth-dev", "context": {
                "cluster": "berth-dev", "user": "berth-admin"}}],
            "current-context": "berth-dev",
        }
        self.kubeconfig.touch(mode=0o600)
        self.kubeconfig.write_text(yaml.safe_dump(conf, sort_keys=False))


def wait_for(check: Callable[[], bool], *, timeout: float, what: str,
             interval: float = 0.25) -> None:
    """Poll ``check`` until it holds; raise TimeoutError naming ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


__all__ = ["DevCluster", "Ports", "StartupError", "StateError", "wait_for"]
