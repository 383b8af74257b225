"""Berth's deployed identity on the cluster under test: config/base/rbac.yaml as installed.

The code lives in :mod:`admission.devcluster.rbac`, shared with ``berth dev-cluster up
--with-berth``; the suite names it from here as it always has.
"""

from admission.devcluster.rbac import (
    RBAC_FILE,
    install_rbac,
    rbac_files,
    service_account_kubeconfig,
    uninstall_rbac,
)

__all__ = ["RBAC_FILE", "install_rbac", "rbac_files", "service_account_kubeconfig",
           "uninstall_rbac"]
