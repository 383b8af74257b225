"""Berth's own webhook on the cluster under test, deployed the way a person would do it locally.

For each test: a copy of config/policy/sample-policy.yaml whose tenants own that test's
namespaces; ``berth certs`` issues the serving pair and renders the
MutatingWebhookConfiguration for a 127.0.0.1 URL, scoped as config/base/webhook.yaml (plus the
test's namespaces); ``berth webhook`` serves it as a separate process; the configuration is
applied with config/base's ValidatingAdmissionPolicy (Berth's pod keys after CREATE,
e2e/policies.py) and the fixture waits until a dry-run GPU pod comes back gated. Everything is
undone afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster import processes
from admission.devcluster.berth import SAMPLE_POLICY, wait_serving, wait_until_gating
from admission.devcluster.binaries import REPO_ROOT
from admission.devcluster.processes import StartupError
from admission.devcluster.rbac import (
    install_rbac,
    rbac_files,
    service_account_kubeconfig,
    uninstall_rbac,
)
from e2e.conftest import E2ECluster, drop_namespace, make_namespace
from e2e.helpers import BERTH, pod_manifest
from e2e.policies import POD_KEYS_POLICY, admission_policies
from e2e.webhooks import registered

GATE = c.SCHEDULING_GATE


@dataclass
class BerthWebhook:
    """A running ``berth webhook`` or ``berth serve`` process, which a test may crash and
    start again (same policy, certificates, port and identity)."""

    policy: Path
    port: int
    argv: list[str]
    workdir: Path
    ca: Path
    env: Mapping[str, str] = field(default_factory=dict)  # added to the process's environment
    record: processes.ProcessRecord | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        assert self.record is not None
        return Path(self.record.log)

    def start(self) -> None:
        name = "berth-serve" if "serve" in self.argv else "berth-webhook"
        self.proc, self.record = processes.spawner(self.workdir)(name, self.argv,
                                                                 env=dict(self.env))
        wait_serving(name, self.port, self.ca, proc=self.proc, record=self.record)

    def kill(self) -> None:
        """SIGKILL the Berth process (a crash, not a graceful stop)."""
        assert self.record is not None and self.proc is not None
        os.killpg(self.record.pgid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.record is not None:
            processes.stop(self.record, self.proc)

    def metric(self, name: str) -> float | None:
        """The value of the unlabelled sample ``name`` on the process's /metrics (None: not
        there)."""
        ctx = processes.https_context(self.ca)
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/metrics", context=ctx,
                                    timeout=5) as response:
            text = response.read().decode()
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else None


def policy_for(namespaces: Mapping[str, str], out: Path, *, window_seconds: float = 2,
               solver_seconds: float = 2,
               edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The sample policy with each tenant owning only the given namespace (tenant -> ns), and
    a short batch window and solver limit so that a test sees a release within seconds (and
    the leader's records saved every 2 s)."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE_POLICY.read_text())
    doc.setdefault("batch", {})["windowSeconds"] = window_seconds
    doc.setdefault("solver", {})["timeLimitSeconds"] = solver_seconds
    doc["batch"]["recordsSaveSeconds"] = 2  # the leader's records saved within a test
    known = {t["name"] for t in doc["tenants"]}
    unknown = set(namespaces) - known
    if unknown:
        raise ValueError(f"tenants {sorted(unknown)} are not in {SAMPLE_POLICY} ({sorted(known)})")
    for tenant in doc["tenants"]:
        tenant["namespaces"] = [namespaces.get(tenant["name"], f"unused-{tenant['name']}")]
    if edit is not None:
        edit(doc)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _berth(*args: str) -> None:
    done = subprocess.run([*BERTH, *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"berth {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")


def _probe_refusal(core: client.CoreV1Api, namespace: str) -> str:
    """What the apiserver answers a dry-run GPU pod now (the refusing webhook's message)."""
    try:
        core.create_namespaced_pod(namespace, pod_manifest("probe", gpus=1), dry_run="All")
    except ApiException as exc:
        return f"dry-run create answered {exc.status}: {exc.body}"
    return "dry-run create now succeeds"


@contextmanager
def berth_webhook(cluster: E2ECluster, workdir: Path, namespaces: Mapping[str, str], *,
                  serve: bool = False, kubeconfig: Path | None = None,
                  lease_namespace: str | None = None,
                  edit_policy: Callable[[dict[str, Any]], None] | None = None,
                  serve_args: Sequence[str] = (),
                  policy_doc: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None,
                  admission_policy_files: Sequence[Path] = (POD_KEYS_POLICY,),
                  ) -> Iterator[BerthWebhook]:
    """``berth webhook`` alone, or with ``serve`` the whole of Berth (``berth serve``: webhook
    and batch controller) talking to the apiserver through ``kubeconfig`` (default: the
    cluster admin's), its Lease in ``lease_namespace`` (default: the first tenant's), with
    ``serve_args`` added to its command line and ``env`` to its environment. ``policy_doc``:
    a whole policy to serve instead of the sample policy made to fit ``namespaces`` (whose
    tenants it must own). ``admission_policy_files``: the ValidatingAdmissionPolicies installed
    beside it (default: the pod-keys policy config/base ships; ``()`` for none, a diagnosis)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if policy_doc is not None:
        policy = workdir / "policy.yaml"
        policy.write_text(yaml.safe_dump(dict(policy_doc), sort_keys=False))
    else:
        policy = policy_for(namespaces, workdir / "policy.yaml", edit=edit_policy)
    port = processes.free_port()
    certs = workdir / "certs"
    rendered = workdir / "webhook.yaml"
    _berth("certs", "--out", str(certs), "--host", "127.0.0.1",
           "--render-webhook-config", str(rendered),
           "--url", f"https://127.0.0.1:{port}/mutate-pods", "--policy", str(policy))
    argv = [*BERTH, "serve" if serve else "webhook", "--policy", str(policy),
            "--cert-dir", str(certs), "--port", str(port)]
    if serve:
        argv += ["--kubeconfig", str(kubeconfig or cluster.kubeconfig),
                 "--namespace", lease_namespace or next(iter(namespaces.values())),
                 "--identity", "e2e", *serve_args]
    hook = BerthWebhook(policy=policy, port=port, argv=argv, workdir=workdir,
                        ca=certs / "ca.crt", env=dict(env or {}))
    try:
        hook.start()
        config: dict[str, Any] = yaml.safe_load(rendered.read_text())
        # Unique per test, so a leftover from a crashed run can never capture another test.
        some_ns = next(iter(namespaces.values()))
        config["metadata"]["name"] = f"berth-{some_ns}"[:63]
        with registered(cluster.api, config), admission_policies(
                cluster.api, suffix=some_ns, namespaces=list(namespaces.values()),
                files=admission_policy_files):
            core = client.CoreV1Api(cluster.api)
            try:
                wait_until_gating(core, some_ns, probe=pod_manifest("probe", gpus=1))
            except StartupError as exc:
                raise AssertionError(f"{exc}\n{_probe_refusal(core, some_ns)}") from None
            yield hook
    finally:
        hook.stop()


@contextmanager
def berth_serve_as_deployed(cluster: E2ECluster, workdir: Path, namespaces: Mapping[str, str],
                            *, components: tuple[str, ...] = (),
                            edit_policy: Callable[[dict[str, Any]], None] | None = None
                            ) -> Iterator[BerthWebhook]:
    """``berth serve`` as the ``berth`` service account of its own namespace, with exactly the
    RBAC of config/base plus that of the named components (config/components/<name>/rbac.yaml,
    where one exists), enforced by the real authorizer. Fails if Berth was refused anything."""
    assert cluster.local is not None
    home = make_namespace(cluster.core, "berth-system")
    created = install_rbac(cluster.api, home, suffix=home, files=rbac_files(components))
    try:
        kubeconfig = service_account_kubeconfig(
            cluster.api, server=cluster.local.server, ca_pem=cluster.ca_bundle_pem(),
            namespace=home, account="berth", out=workdir.parent / "berth-sa.kubeconfig")
        with berth_webhook(cluster, workdir, namespaces, serve=True, kubeconfig=kubeconfig,
                           lease_namespace=home, edit_policy=edit_policy) as hook:
            yield hook
            forbidden = [line for line in hook.log.read_text(errors="replace").splitlines()
                         if "forbidden" in line.lower()]
            assert not forbidden, "berth serve was refused by RBAC:\n" + "\n".join(forbidden)
    finally:
        uninstall_rbac(cluster.api, created)
        drop_namespace(cluster.api, home)
