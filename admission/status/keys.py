"""Names ``berth status`` reads.

Reservations (where and when a gang that cannot fit starts earliest) were designed before the
controller wrote them, under these names; the status shows nothing when none exist. Reclaims
(a tenant within its quota taking GPUs back from tenants on borrowed quota, docs/reclaim.md)
are written by the controller: their Event reason is :data:`admission.constants.EVENT_RECLAIMED`.
"""

from __future__ import annotations

from typing import Final

from admission import constants as c
from admission.controller import keys

# On a waiting pod: its gang's reservation, as the controller will spell it (shown verbatim).
ANNOTATION_RESERVATION: Final = f"{c.DOMAIN}/reservation"
# The Waiting condition's or an Event's reason for a gang that holds a reservation.
REASON_RESERVED: Final = "Reserved"
# An Event's reason on a pod Berth evicted to give a tenant back its quota (the controller's).
REASON_RECLAIMED: Final = c.EVENT_RECLAIMED

CONDITION_WAITING: Final = keys.CONDITION_WAITING
EVENT_COMPONENT: Final = keys.EVENT_COMPONENT
# Where config/base installs Berth: its namespace, the policy ConfigMap and the Lease.
BERTH_NAMESPACE: Final = "berth-system"
POLICY_CONFIG_MAP: Final = "berth-policy"
POLICY_KEY: Final = "policy.yaml"
LEASE: Final = "berth-controller"
