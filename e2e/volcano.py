"""The real Volcano scheduler beside the cluster under test, for one test at a time.

Starting it (its CRDs, the process, its health) lives in :mod:`admission.devcluster.volcano`,
shared with ``berth dev-cluster up --with-berth --backend volcano``; here it is a context
manager that stops it after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from admission.devcluster import processes
from admission.devcluster.volcano import install_crds, start_scheduler
from e2e.conftest import E2ECluster

__all__ = ["install_crds", "volcano_scheduler"]


@contextmanager
def volcano_scheduler(cluster: E2ECluster, workdir: Path) -> Iterator[processes.ProcessRecord]:
    proc, record = start_scheduler(cluster.api, processes.spawner(workdir),
                                   kubeconfig=cluster.kubeconfig, workdir=workdir)
    try:
        yield record
    finally:
        processes.stop(record, proc)
