"""The batch controller: from gated pods to released gangs.

It watches pods and nodes, keeps an inventory, and once per batch window runs a short numbered
cycle (:mod:`.cycle`): gather each tenant's complete gangs, snapshot, solve off the event loop,
check, release, and tell every pod left waiting why. Kubernetes is its only store: the plan
lives in annotations on the pods it concerns, so a restarted controller rebuilds everything
from the API server.
"""

from __future__ import annotations

from admission.controller.api import ApiError, ClusterApi, Conflict, Gone, Json, NotFound
from admission.controller.controller import Controller
from admission.controller.metrics import Metrics
from admission.controller.settings import Settings, from_policy, release_writers
from admission.controller.solving import WorkerSolver

__all__ = [
    "ApiError",
    "ClusterApi",
    "Conflict",
    "Controller",
    "Gone",
    "Json",
    "Metrics",
    "NotFound",
    "Settings",
    "WorkerSolver",
    "from_policy",
    "release_writers",
]
