"""config/ as an admin applies it: the rendered overlays pass the real apiserver's validation.

``kubectl apply --dry-run=server`` of what ``kubectl kustomize`` renders (the pinned kubectl):
every object is validated and admitted by kube-apiserver v1.34 as if created - the webhook's
matchConditions and the ValidatingAdmissionPolicies' CEL compile, the NetworkPolicies and the
split Deployments are well formed, and the namespace kustomize writes on the cluster-scoped
policies (it does not know their scope) is harmless. Nothing is stored. The Kueue, Volcano and
cert-manager overlays need those projects' CRDs and are left out.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from kubernetes.client.rest import ApiException

from admission.devcluster.binaries import REPO_ROOT, binary
from e2e.conftest import E2ECluster
from e2e.helpers import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="creates berth-system, which an installed Berth owns"),
]


@pytest.mark.parametrize("overlay", ["standalone", "split"])
def test_overlay_passes_server_side_validation(cluster: E2ECluster, overlay: str) -> None:
    kubectl = str(binary("kubectl"))
    rendered = subprocess.run([kubectl, "kustomize", str(REPO_ROOT / "config" / "overlays" /
                                                         overlay)],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    # Namespaced objects need their namespace to exist even in a dry run.
    created = False
    try:
        cluster.core.create_namespace({"metadata": {"name": "berth-system"}})
        created = True
    except ApiException as exc:
        if exc.status != 409:
            raise
    try:
        done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "apply",
                               "--dry-run=server", "-f", "-"], input=rendered,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        for kind in ("validatingadmissionpolicy.admissionregistration.k8s.io/berth-pod-keys",
                     "mutatingwebhookconfiguration.admissionregistration.k8s.io/berth",
                     "validatingadmissionpolicy.admissionregistration.k8s.io/berth-agent-node"):
            assert kind in done.stdout, done.stdout
    finally:
        if created:
            cluster.core.delete_namespace("berth-system")
            eventually(lambda: _exists(cluster, "berth-system"), lambda there: not there,
                       timeout=60, what="berth-system to be deleted")


def _exists(cluster: E2ECluster, name: str) -> bool:
    try:
        cluster.core.read_namespace(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
