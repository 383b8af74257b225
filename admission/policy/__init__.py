"""The cluster admin's policy: one YAML file, validated as a whole.

This module is the import point for the rest of Berth::

    from admission.policy import Policy, load_policy, to_solver

The model lives in :mod:`admission.policy.model`, loading and error reporting in
:mod:`admission.policy.load`, cross-reference checks in :mod:`admission.policy.refs`, and the
mapping to the solver's types in :mod:`admission.policy.solver_view`.
"""

from __future__ import annotations

from admission.policy.load import PolicyError, PolicyIssue, check_text, load_policy
from admission.policy.model import (
    API_VERSION,
    MIN_SETTLE_SECONDS,
    Admission,
    Batch,
    Borrowing,
    GpuModel,
    Limits,
    Mig,
    MigProfile,
    Mps,
    Policy,
    QoSClass,
    Queues,
    Quota,
    Release,
    Sharing,
    SolverSettings,
    Tenant,
    TimeSlicing,
    Topology,
    TopologyLevel,
)
from admission.policy.solver_view import to_solver

__all__ = [
    "API_VERSION",
    "MIN_SETTLE_SECONDS",
    "Admission",
    "Batch",
    "Borrowing",
    "GpuModel",
    "Limits",
    "Mig",
    "MigProfile",
    "Mps",
    "Policy",
    "PolicyError",
    "PolicyIssue",
    "QoSClass",
    "Queues",
    "Quota",
    "Release",
    "Sharing",
    "SolverSettings",
    "Tenant",
    "TimeSlicing",
    "Topology",
    "TopologyLevel",
    "check_text",
    "load_policy",
    "to_solver",
]
