"""A real Kubernetes control plane started as processes, for the e2e suite and for people.

No container engine runs where Berth is developed and tested, so kind cannot start; the
upstream kube-apiserver, kube-controller-manager, kube-scheduler and etcd can, built from the
Go module proxy by ``e2e/build.sh``, with kwok standing in for kubelets on fake GPU nodes.
Used by the pytest fixture in ``e2e/conftest.py`` and by ``berth dev-cluster``.

``cluster.py`` starts the control plane (``processes.py``: records, logs, clean stops),
``nodes.py`` the fake GPU nodes, ``pki.py`` the certificates. What runs beside it for
``berth dev-cluster up --with-berth`` and the e2e suite alike: ``berth.py`` (Berth itself: the
sample policy, certificates, ``berth serve``, its webhook), ``rbac.py`` and ``policies.py``
(Berth's identity and pod-keys policy as config/base gives them), ``kueue.py`` and
``volcano.py`` (the real Kueue manager and Volcano scheduler), ``kube.py`` (namespaces, CRDs).
"""

from admission.devcluster.binaries import MissingBinary
from admission.devcluster.cluster import DevCluster, wait_for
from admission.devcluster.nodes import FakeGpuNode, create_nodes, gpu_fleet
from admission.devcluster.processes import StartupError

__all__ = [
    "DevCluster",
    "FakeGpuNode",
    "MissingBinary",
    "StartupError",
    "create_nodes",
    "gpu_fleet",
    "wait_for",
]
